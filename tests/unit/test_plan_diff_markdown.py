"""What `trainstack plan-diff` renders into the pull-request comment: a value of a plan (a
resource's name, an input, the code's entrypoint) cannot write Markdown of its own (a
heading, a link, an @mention), and a value the credential scanner flags never shows, with or
without `--show-values`: a hash of it shows that it changed."""

from __future__ import annotations

from typing import Any

from trainstack.infra.plan_diff import plan_diff
from trainstack.infra.plan_env import env_hash

INJECTED = "b`\n# PWNED [click](https://evil.example) @everyone"
OLD_KEY, NEW_KEY = "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_9ZZ39HqLyjWDarjtT1zdp7dc"


def _plan(bucket: str, key: str, password: str) -> dict[str, Any]:
    return {
        "stack": "s",
        "resources": [
            {"type": "gcp:storage/bucket:Bucket", "name": bucket, "inputs": {"location": "US"}},
            {
                "type": "kubernetes:batch/v1:Job",
                "name": "job",
                "inputs": {"spec": {"args": ["--password", password, "--steps", "10"]}},
            },
        ],
        "code": {"source": "code", "entrypoint": ["python", "train.py", "--api-key", key]},
    }


def test_values_write_no_markdown_and_credentials_never_show() -> None:
    for show_values in (False, True):
        diff = plan_diff(
            _plan("a", OLD_KEY, "hunter2"),
            _plan(INJECTED, NEW_KEY, "hunter3"),
            show_values=show_values,
        )
        assert diff.splitlines() == [
            "## trainstack plan diff",
            "",
            "### Stack `s`: 1 to add, 1 to change, 0 to replace, 1 to delete",
            "",
            "- **code** `s`: entrypoint `python train.py --api-key [contains a Stripe API key, "
            f"{env_hash(OLD_KEY)}]` -> `python train.py --api-key [contains a Stripe API key, "
            f"{env_hash(NEW_KEY)}]`",
            "",
            # One code span on one line: no heading, link or mention renders.
            "- **add** `b'\\n# PWNED [click](https://evil.example) @everyone` "
            "(gcp:storage/bucket:Bucket)",
            "",
            "- **delete** `a` (gcp:storage/bucket:Bucket)",
            "",
            "- **change (may replace)** `job` (kubernetes:batch/v1:Job): no replace-on-change "
            "table covers `spec.args[1]`",
            f"  - `spec.args[1]`: `[sets password, {env_hash('hunter2')}]` -> "
            f"`[sets password, {env_hash('hunter3')}]`",
        ]


def test_an_odd_type_and_quota_id_are_code_too() -> None:
    base = {"stack": "s", "resources": []}
    head = {
        "stack": "s",
        "resources": [{"type": "x:y:Z\n# H @team", "name": "n", "inputs": {}}],
        "quota": [{"quota_id": "Q|`x`", "dimensions": {"region": "r|1"}, "needed": 1}],
    }
    assert plan_diff(base, head).splitlines() == [
        "## trainstack plan diff",
        "",
        "### Stack `s`: 1 to add, 0 to change, 0 to replace, 0 to delete",
        "",
        "| quota | dimensions | base | head | delta |",
        "|---|---|---|---|---|",
        "| `Q\\|'x'` | `region=r\\|1` | 0 | 1 | +1 |",
        "",
        "- **add** `n` (`x:y:Z\\n# H @team`)",
    ]
