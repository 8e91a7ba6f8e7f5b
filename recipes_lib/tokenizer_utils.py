"""The reference cookbook's name for `recipes_lib.tokenizers` (same objects, not copies).

    from recipes_lib.tokenizer_utils import get_tokenizer
"""

from recipes_lib.tokenizers import Tokenizer, get_tokenizer, register_tokenizer

__all__ = ["Tokenizer", "get_tokenizer", "register_tokenizer"]
