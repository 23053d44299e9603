# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The stack's components, one module each (see base.py for the shape)."""
