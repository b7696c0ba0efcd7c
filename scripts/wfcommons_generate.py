"""Writes WfCommons workflow instances made by the wfcommons package's own
recipes (Montage and BLAST, seeded), for scripts/wfcommons-check.sh."""
import pathlib
import random
import sys

import numpy
from wfcommons import WorkflowGenerator
from wfcommons.wfchef.recipes import BlastRecipe, MontageRecipe

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name, recipe, tasks in [("montage", MontageRecipe, 60), ("blast", BlastRecipe, 45)]:
    random.seed(4)
    numpy.random.seed(4)
    workflow = WorkflowGenerator(recipe.from_num_tasks(tasks)).build_workflow()
    workflow.write_json(out / f"{name}.json")
    print(out / f"{name}.json")
