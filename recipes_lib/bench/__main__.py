"""`python -m recipes_lib.bench key=value...`: see recipes_lib/bench/__init__.py."""

from recipes_lib.bench.run import main

main()
