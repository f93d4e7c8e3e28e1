"""Several Ollama boxes behind one tap: the boxes (spec.py, box.py), the router that picks one
per request (router.py), the answers made from all of them (unions.py). docs/boxes.md."""
