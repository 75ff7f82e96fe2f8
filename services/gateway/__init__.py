"""Gateway: the public HTTP API, the web page, and the fan-out over the streams."""
