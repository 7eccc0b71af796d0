"""``--help`` of the command line answers at once: no model library loads, and the defaults it shows are the ones
the code applies (one source each, in ``limits`` and ``vlm.timeouts``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "gradio", "cv2")
CPU_SECONDS = 0.5  # measured: about 0.05 s (interpreter start included); it was 3.4 s while --help imported torch

HELP_PROBE = """
import json, resource, sys
from sam3_agent.cli.main import main
for command in ([], ["run"], ["video"], ["export"], ["batch"], ["eval"]):
    try:
        main([*command, "--help"])
    except SystemExit:
        pass
usage = resource.getrusage(resource.RUSAGE_SELF)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[1:])
sys.__stderr__.write(json.dumps({"heavy": heavy, "cpu": usage.ru_utime + usage.ru_stime}))
"""


def test_help_of_every_subcommand_loads_no_model_library_and_takes_little_cpu():
    done = subprocess.run([sys.executable, "-c", HELP_PROBE, *HEAVY], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stderr)
    assert report["heavy"] == []
    assert report["cpu"] < CPU_SECONDS
    assert done.stdout.count("usage: python -m sam3_agent") == 6


def test_help_names_the_console_script_when_run_as_it(capsys):
    from sam3_agent.cli.main import main

    with pytest.raises(SystemExit) as stop:
        main(["run", "--help"], prog="sam3-agent")
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: sam3-agent run [-h] --image IMAGE --query QUERY --out OUT")


def test_the_defaults_the_flags_show_are_those_the_code_applies(capsys):
    from sam3_agent.agent.config import AgentConfig
    from sam3_agent.cli.main import main
    from sam3_agent.cli.parser import build_parser
    from sam3_agent.images import MAX_PIXELS
    from sam3_agent.sam.segmenter import Sam3Segmenter
    from sam3_agent.vlm.openai_server import ServerTimeouts

    parser = build_parser()
    args = parser.parse_args(["run", "--image", "x.jpg", "--query", "q", "--out", "o"])
    config = AgentConfig()
    assert (args.max_rounds, args.score_threshold, args.max_image_pixels) == (30, 0.5, 64_000_000)
    assert (config.max_rounds, config.score_threshold, config.verify_batch_size) == (30, 0.5, 8)
    assert MAX_PIXELS == 64_000_000
    assert Sam3Segmenter.segment.__defaults__ == (0.5,)
    assert ServerTimeouts() == ServerTimeouts(connect=10.0, read=120.0, deadline=600.0)
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    run_help = " ".join(capsys.readouterr().out.split())
    for shown in ("(default 30)", "(default 0.5)", "(default 64,000,000)", "default 8, fewer on a small GPU",
                  "(default $SAM3_AGENT_VLM_SERVER_CONNECT_TIMEOUT or 10)",
                  "(default $SAM3_AGENT_VLM_SERVER_READ_TIMEOUT or 120)",
                  "(default $SAM3_AGENT_VLM_SERVER_DEADLINE or 600)"):
        assert shown in run_help


def test_the_vlm_model_help_and_the_docs_name_the_same_families():
    from sam3_agent.cli.parser import build_parser
    from sam3_agent.ui.settings import build_parser as build_app_parser

    families = ("Qwen2.5-VL", "Qwen3-VL", "Qwen3.5", "Qwen3.6", "any other image-text-to-text model")
    helps = [next(a.help for a in parser._actions if "--vlm-model" in a.option_strings)
             for parser in (build_parser()._subparsers._group_actions[0].choices["run"], build_app_parser())]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    models_table = readme[readme.index("## Models"):readme.index("| GPU |")]
    cli_page = " ".join((ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split())
    vlm_model_option = cli_page[cli_page.index("`--vlm-model ID_OR_FOLDER`"):cli_page.index("`--vlm-server http")]
    for text in (*helps, models_table, vlm_model_option):
        assert [f for f in families if f not in text] == [], text
