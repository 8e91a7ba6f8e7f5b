"""The local engine served over the Tinker REST API, so the official `tinker` SDK drives it.

Run: `python -m local_tinker.server port=8000 precision=float32` and point any SDK program at it
with `TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=<the server's key>` (or the recipes
with `backend=tinker backend.base_url=http://127.0.0.1:8000`). See docs/serving.md.

Modules: `app.py` (the FastAPI app, auth, body limit, session endpoints), `training.py`,
`sampling.py` and `rest.py` (the other endpoints), `messages.py` (parsing and answers),
`wire.py` (the protobuf bodies), `state.py` (what the process holds), `futures.py` (request ids
polled by the SDK), `registry.py` (sessions, models, samplers, losses), `naming.py`
(`tinker://` <-> `local://` paths), `serve.py` and `__main__.py` (the chz config and uvicorn).
"""
