"""Print every job of a workflow's DAG as JSON (rule, container, inputs, outputs, logs, params, resources).

    python tests/dag_probe.py REPO CONFIGFILE CACHE_DIR [--apptainer] [TARGET ...]

Builds the DAG the way `snakemake -n --forceall` does, through Snakemake 9's API (and two of its
internal steps: Snakemake has no public call that returns the jobs).
"""

import json
import sys
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.settings.types import (
    ConfigSettings, DAGSettings, DeploymentMethod, DeploymentSettings, OutputSettings, ResourceSettings,
)


def main(argv):
    repo, configfile, cache, *rest = argv
    flags = {a for a in rest if a.startswith("--")}
    targets = [a for a in rest if not a.startswith("--")]
    methods = {DeploymentMethod.APPTAINER} if "--apptainer" in flags else set()
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(
            snakefile=Path(repo) / "Snakefile", workdir=Path(repo),
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[Path(configfile)], config={"cache": {"dir": cache}}),
            deployment_settings=DeploymentSettings(deployment_method=methods),
        )
        dag_api = wf.dag(DAGSettings(targets=set(targets)))
        w = dag_api.workflow_api._workflow
        w._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        w._build_dag()
        jobs = []
        for job in w.dag.jobs:
            res = {k: v for k, v in job.resources.items() if k not in ("_cores", "_nodes", "tmpdir")}
            jobs.append({
                "rule": job.rule.name,
                "container": job.container_img_url,
                "input": [str(f) for f in job.input],
                "output": [str(f) for f in job.output],
                "log": [str(f) for f in job.log],
                "params": {k: v for k, v in job.params.items() if isinstance(v, (int, float, str))},
                "shell": job.rule.shellcmd or "",
                "resources": {k: v for k, v in res.items() if isinstance(v, (int, float, str))},
            })
    print(json.dumps(sorted(jobs, key=lambda j: (j["rule"], j["input"])), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
