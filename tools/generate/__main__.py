import sys

from tools.generate.tables import main

sys.exit(main())
