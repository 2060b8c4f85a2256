"""Which test cells grade which answer, where answers build on each other.

An answer that uses others (05's ``multi_head_attention`` and ``pre_ln_block``, 06's
``sample_step``, 07's ``max_ref_counts``, ``modified_precision`` and ``corpus_bleu``) takes a
keyword ``parts``; its test cells pass reference versions (or recording stand-ins) in through it
and never read the names of the answers it builds on. So each answer is graded by its own cells
only, which this pins from the notebooks' text (``selftest.answer_map``), points included. That
a stubbed answer then costs exactly those cells is ``selftest --independence``'s job, which
``test_autograder.py`` runs for every assignment.
"""

import re

import nbformat
import pytest

from autograder.authoring.selftest import answer_map
from autograder.course import assignments, source_notebook

OWN_CELLS = {  # assignment: (answer cell: the test cells that read its names), points tests grade
    "05_transformer": ({
        "sdpa": {"test_sdpa", "test_sdpa_mask"},
        "split_merge": {"test_split_heads", "test_merge_heads"},
        "mha": {"test_mha", "test_mha_mask"},
        "positions": {"test_positions"},
        "causal": {"test_causal_mask"},
        "block": {"test_block_ffn", "test_block"},
    }, 15),
    "06_decoding": ({
        "greedy": {"test_greedy", "test_greedy_stopping"},
        "beam_search": {"test_beam_search_small", "test_beam_search_length_penalty",
                        "test_beam_search_exhaustive", "test_beam_search_cost"},
        "filters": {"test_temperature", "test_top_k", "test_top_p"},
        "sample_step": {"test_sample_step_filters", "test_sample_step_frequencies"},
    }, 15),
    "07_bleu": ({
        "ngrams": {"test_ngrams"},
        "max_ref_counts": {"test_max_ref_counts"},
        "modified_precision": {"test_modified_precision"},
        "brevity_penalty": {"test_brevity_penalty"},
        "corpus_bleu": {"test_corpus_bleu_examples", "test_corpus_bleu_random"},
    }, 13),
    "08_bert_mlm": ({
        "mask_tokens": {"test_mask_rules", "test_mask_rates", "test_mask_generator"},
        "mlm_loss": {"test_mlm_loss_value", "test_mlm_loss_ignores"},
        "pack_pair": {"test_pack_layout", "test_pack_truncation"},
    }, 12),
}


@pytest.mark.parametrize("assignment", sorted(OWN_CELLS))
def test_each_answer_is_graded_by_its_own_cells_only(assignment):
    own, total = OWN_CELLS[assignment]
    nb = nbformat.read(source_notebook(assignment), as_version=4)
    assert {cell: info["tests"] for cell, info in answer_map(nb).items()} == own
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
              and not c.metadata["nbgrader"].get("solution")}  # written answers: by hand
    assert set(points) == set().union(*own.values()) and sum(points.values()) == total


def solution_lines(nb) -> int:
    """Lines of code between the solution markers: blank lines and comments not counted."""
    count, inside = 0, False
    for cell in nb.cells:
        for line in cell.source.splitlines() if cell.cell_type == "code" else ():
            text = line.strip()
            if text in ("### BEGIN SOLUTION", "### END SOLUTION"):
                inside = text == "### BEGIN SOLUTION"
            elif inside and text and not text.startswith("#"):
                count += 1
    return count


@pytest.mark.parametrize("assignment", assignments())
def test_header_states_the_size_of_the_solution(assignment):
    """No one measured how long students take, so a header promises no hours: it states the
    size of the reference solution, which this counts."""
    nb = nbformat.read(source_notebook(assignment), as_version=4)
    header = " ".join(nb.cells[0].source.split())
    stated = re.findall(r"The reference solution is (\d+) lines of code \(blank lines and "
                        r"comments not counted\)\.", header)
    assert stated == [str(solution_lines(nb))], (
        f"{assignment}'s header should say 'The reference solution is {solution_lines(nb)} lines "
        f"of code (blank lines and comments not counted).', it says {stated or 'nothing'}")
    assert not re.search(r"\b(hours?|minutes)\b", header.replace("under a minute", "")), (
        f"{assignment}'s header promises a time no one measured")
