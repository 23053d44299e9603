# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The stack's components, one module each (see base.py for the shape)."""

from __future__ import absolute_import, annotations, division, print_function

from ansible_collections.provision.gpu.plugins.module_utils.components import health, health_deep

# The components already in the new shape, by NAME (evaluate.py judges the others itself).
REGISTRY = {health.NAME: health, health_deep.NAME: health_deep}
# judged only when asked for by name (`provision check --deep`: DCGM loads the GPUs), never by
# default
ON_REQUEST = (health_deep.NAME,)
