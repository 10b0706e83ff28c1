"""build_model (rae/build.py): the stages' steps at params.yaml's defaults, in one call, without DVC."""

from __future__ import annotations

from raexmc import RaeModel, build_model
from raexmc.rae import build
from raexmc.settings import load_settings
from tests.helpers import REPO


def test_the_build_defaults_are_params_yaml_s():
    p = load_settings(REPO / "params.yaml")
    assert build.TOKENIZE == p.tokenize
    assert (build.PRECISION, build.RELEVANCE, build.EF_SEARCH) == (p.embed.precision, p.infer.relevance,
                                                                   p.infer.ef_search)
    assert build.GRAPH == {"M": p.index.M, "ef_construction": p.index.ef_construction}
    # the memory it builds keeps every input key: keep auto needs the tune stage, and chooses 1 on FOLDOC
    assert (p.memory.keep in (1.0, "auto"), p.memory.prior, p.memory.compression) == (True, False, "none")


def test_a_model_built_from_an_lf_folder_answers_with_the_datasets_label_ids(tmp_path, lf_folder, tiny_model):
    model = build_model(tiny_model, dataset=lf_folder, out=tmp_path / "model", device="cpu")
    answers, _ = model.predict(["python scripting"], k=5)
    assert sorted(answer["id"] for answer in answers[0]) == ["l0", "l1", "l2", "l3", "l4"]  # tests/helpers.py's
    assert model.num_inputs == 4 and model.settings.tau == 0.04
    assert RaeModel.load(tmp_path / "model").predict(["python scripting"], k=5)[0] == answers
