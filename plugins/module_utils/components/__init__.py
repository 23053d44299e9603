# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The stack's components, one module each (see base.py for the shape).

COMPONENTS lists every component module in the order a provisioning run applies their roles; each
declares NAMES or NAME, ROLE and CHECKS (the catalogue, check_catalogue.py, is derived from them).
preflight .. pytorch are judged by evaluate.py's Judge, the union of their classes; the REGISTRY
modules (health, health_deep) judge with a function, judge(ctx).
"""

from __future__ import absolute_import, annotations, division, print_function

from ansible_collections.provision.gpu.plugins.module_utils.components import (
    cuda,
    driver,
    env,
    health,
    health_deep,
    libraries,
    preflight,
    pytorch,
    repo,
    validation,
)

COMPONENTS = (
    preflight,
    repo,
    driver,
    cuda,
    libraries,
    env,
    pytorch,
    validation,
    health,
    health_deep,
)
# The components in the function shape, by NAME (evaluate.py calls their judge(ctx)).
REGISTRY = {health.NAME: health, health_deep.NAME: health_deep}
# judged only when asked for by name (`provision check --deep`: DCGM loads the GPUs), never by
# default
ON_REQUEST = (health_deep.NAME,)
# Each changing component's plan record (provision_plan.<component>, a TypedDict the judge builds
# and the probe module publishes as it is) and the record's fields no role reads, with the reason
# (tests/unit/test_plan_fields.py holds the roles' YAML to these). preflight and the health tiers
# plan nothing.
PLANS = {
    "repo": (repo.RepoPlan, repo.PLAN_REPORT_ONLY),
    "driver": (driver.DriverPlan, driver.PLAN_REPORT_ONLY),
    "cuda": (cuda.CudaPlan, cuda.PLAN_REPORT_ONLY),
    "cudnn": (libraries.LibraryPlan, libraries.PLAN_REPORT_ONLY),
    "nccl": (libraries.LibraryPlan, libraries.PLAN_REPORT_ONLY),
    "env": (env.EnvPlan, env.PLAN_REPORT_ONLY),
    "pytorch": (pytorch.PytorchPlan, pytorch.PLAN_REPORT_ONLY),
}
