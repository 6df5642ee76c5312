"""`python -m lexpilot.scripted --port P`: the scripted provider as a server (README: "Try every stage without a
provider")."""
import sys

from lexpilot.scripted.provider import main

sys.exit(main())
