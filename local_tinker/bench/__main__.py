"""`python -m local_tinker.bench key=value...`: see local_tinker/bench/__init__.py."""

from local_tinker.bench.run import main

main()
