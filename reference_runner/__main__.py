"""``python -m reference_runner``, and ``python path/to/reference_runner`` (the directory).

Why it exists: the runner is a program. ``-m`` needs the package importable, which an
interpreter a conversation account can run (``/usr/bin/python3``) may not find where the
gateway is installed; so the directory itself can be started too, as a script is: Python
then runs this file outside any package, with the directory itself first on ``sys.path``,
and that entry becomes the directory's parent so that the package's modules import as
``reference_runner.*`` and none of them shadows a top-level module.
"""

import os
import sys

if not __package__:  # started as a directory or a file, not with -m
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from reference_runner.cli import main

sys.exit(main())
