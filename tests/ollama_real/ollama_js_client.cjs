// ollama-js, unchanged, as an app uses it: `node ollama_js_client.cjs HOST MODEL` with NODE_PATH
// naming the node_modules that holds it. Prints one JSON object of what each call gave, less
// what differs between two runs (clocks, durations), for tests/ollama_real/test_ollama_js.py
// to compare through the proxy and direct.
"use strict";

const { Ollama } = require("ollama");

const GREEDY = { temperature: 0, seed: 7, num_predict: 12 };
const VOLATILE = new Set([
  "created_at", "modified_at", "expires_at", "total_duration", "load_duration",
  "prompt_eval_duration", "eval_duration",
]);

function stable(value) {
  return JSON.parse(JSON.stringify(value, (key, v) => (VOLATILE.has(key) ? undefined : v)));
}

async function failure(call) {
  try {
    await call();
    return null;
  } catch (error) {
    return { name: error.name, status_code: error.status_code, error: error.error };
  }
}

async function main() {
  const [host, model] = process.argv.slice(2);
  const ollama = new Ollama({ host });
  const messages = [{ role: "user", content: "Say hello." }];
  const out = {};
  out.version = await ollama.version();
  out.list = stable(await ollama.list());
  out.show = stable(await ollama.show({ model }));
  const chunks = [];
  for await (const chunk of await ollama.chat({ model, messages, stream: true, options: GREEDY })) {
    chunks.push(stable(chunk));
  }
  out.chat = chunks;
  out.generate = stable(await ollama.generate({ model, prompt: "One, two,", options: GREEDY }));
  out.ps = (await ollama.ps()).models.map((m) => m.name);
  out.embed = await failure(() => ollama.embed({ model, input: "a red fox" }));
  out.missing = await failure(() => ollama.show({ model: "no-such-model" }));
  // A stream the app abandons: ollama-js aborts its fetch, closing the connection, and the
  // loop ends in an AbortError.
  const abandoned = await ollama.generate({
    model, prompt: "Count to one hundred.", stream: true, options: { num_predict: 200 },
  });
  out.abandoned = await failure(async () => {
    for await (const part of abandoned) {
      if (part.response) {
        abandoned.abort();
      }
    }
  });
  process.stdout.write(JSON.stringify(out));
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
