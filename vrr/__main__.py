"""``python -m vrr generate|resolve|label|measure-judge-styles ...`` (see ``vrr.chain.main``)."""
from .chain import main

raise SystemExit(main())
