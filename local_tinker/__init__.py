"""The local Tinker engine: the Tinker client surface (`ServiceClient`, `TrainingClient`,
`SamplingClient`) computed in this process with torch, transformers and peft, its REST server and
its benchmark. A product of its own: nothing here imports the cookbook (`recipes_lib` and above).

Its face (what the cookbook may import, each through one doorway; tests/test_layering.py holds it):
    clients.py      ServiceClient: the Tinker client surface   <- recipes_lib/backends (make_service_client)
    main_thread.py  run_with_engine_on_main_thread: the engine computes on the main thread   <- recipes_lib/backends
    export.py       a local checkpoint's folder; a base model with a LoRA merged   <- recipes_lib/export.py
    tokenizers.py   get_tokenizer: offline and hub tokenizers   <- recipes_lib/tokenizers.py
    errors.py       the user-mistake errors both sides raise   <- recipes_lib/exceptions.py
    home.py         $RECIPES_HOME and the offline model files   <- recipes_lib/paths.py
    command.py      key=value arguments, one line per mistake   <- recipes_lib/argv.py
    server/         python -m local_tinker.server: the engine over the Tinker REST API
    bench/          python -m local_tinker.bench (make bench): speed against the machine and peers

Inside, by stage of a request:
    engine.py       one base model per (name, dtype), LoRA adapters, the per-client request queues
    models.py catalog.py           base models (hub, offline GGUF, tiny test models) and their names
    precision.py budget.py memory.py activations.py   numerics, micro-batch sizing, memory bounds
    trainer.py batch.py losses.py custom_loss.py logits.py optimizer.py stability.py   training
    sampler.py decoder.py attention.py projections.py scoring.py   sampling and prompt log-probs
    adapters.py storage.py rest.py   LoRA snapshots, safetensors checkpoints, REST-shaped records
    futures.py      the futures every client call returns
"""
