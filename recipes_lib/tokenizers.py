"""`get_tokenizer(model_name)`: the cookbook's doorway to the tokenizers the engine serves.

The engine owns tokenizer loading (its clients' `get_tokenizer()` and its offline model files need
it; `local_tinker/tokenizers.py` lists the sources); renderers, datasets and recipes use these names.
"""

from local_tinker.tokenizers import Tokenizer, get_tokenizer, register_tokenizer

__all__ = ["Tokenizer", "get_tokenizer", "register_tokenizer"]
