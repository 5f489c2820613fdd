"""Prints the versions of the bench stack's packages (a stand-in for a model's source tree)."""

import idna
import safetensors
import six

print(six.__version__, idna.__version__, safetensors.__version__)
