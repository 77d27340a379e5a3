"""Each hwsel question's fields are declared once (`hwsel.questions`): the CLI subcommand's options
and the REST request model are built from that declaration, with its help, type and bounds."""

from __future__ import annotations

import argparse

import pytest

from hwsel import questions
from hwsel.cli_parser import build_parser
from hwsel.rest_models import (
    AnalysisRequest,
    DistributedRequest,
    MapRequest,
    MatrixRequest,
    NextRequest,
    PredictRequest,
    SelectRequest,
)

ASKED = [("next", questions.NEXT, NextRequest), ("distributed", questions.DISTRIBUTED, DistributedRequest),
         ("map", questions.MAP, MapRequest), ("matrix", questions.MATRIX, MatrixRequest),
         ("analyze", questions.ANALYZE, AnalysisRequest), ("select", questions.SELECT, SelectRequest),
         ("predict", questions.PREDICT, PredictRequest)]


def _subcommand(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize(("command", "fields", "model"), ASKED)
def test_the_cli_and_the_rest_model_come_from_one_declaration(command: str, fields: tuple, model: type) -> None:
    options = {a.dest: a for a in _subcommand(command)._actions}
    schema = model.model_json_schema()["properties"]
    for f in fields:
        option, rest = options[f.name], model.model_fields[f.name]
        assert option.option_strings == [f.flag] and option.help.startswith(f.help)
        assert rest.description == f.help
        default = list(f.default) if isinstance(f.default, tuple) else f.default
        assert option.default == default == rest.default
        assert (option.nargs == "+") == bool(f.many)
        text = repr(schema[f.name])
        for bound, key in ((f.ge, "minimum"), (f.gt, "exclusiveMinimum"), (f.le, "maximum")):
            if bound is not None:
                assert f"'{key}': {bound!r}" in text, (f.name, key, text)


@pytest.mark.parametrize(("command", "fields", "model"), ASKED)
def test_bounds_hold_on_both_doors(command: str, fields: tuple, model: type) -> None:
    base = {"model_name": "gpt2"} if command in {"distributed", "analyze", "select", "predict"} else {}
    for f in fields:
        if f.le is None:
            continue
        above = f.type(f.le) + 1
        with pytest.raises(SystemExit) as stop:
            build_parser().parse_args([command, *(["--model", "gpt2"] if base else []), f.flag, str(above)])
        assert stop.value.code == 2
        with pytest.raises(ValueError, match=f.name):
            model(**base, **{f.name: [above] if f.many else above})


#: What a front door adds to a question: where the data come from, how to print, which model.
TRANSPORT = {"help", "source", "timeout", "json", "output", "model", "model_config", "model_name", "model_family",
             "tracking_uri", "include_noisy", "config", "backend", "device"}


@pytest.mark.parametrize(("command", "fields", "model"), ASKED)
def test_a_question_has_no_field_besides_its_declaration(command: str, fields: tuple, model: type) -> None:
    """Every option of the subcommand and every request field is a declared field or the front
    door's own (`TRANSPORT`): a question's field is typed in its declaration only."""
    declared = {f.name for f in fields}
    own = TRANSPORT | ({"hardware"} if command == "predict" else set())  # a list or, in REST, one name
    assert {a.dest for a in _subcommand(command)._actions} - own == declared
    assert set(model.model_fields) - own == declared
