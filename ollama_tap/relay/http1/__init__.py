"""The HTTP/1 transport (the default, `relay = "fast"`): llhttp on both sides, each reply
piece written to the client from the upstream socket's own callback, with no task switch,
future or awaited write per piece."""
