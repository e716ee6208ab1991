import sys

from medseg.cli import main

sys.exit(main())
