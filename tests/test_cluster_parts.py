"""The parts of ``python -m autograder slurm`` that need no cluster: an instructor's sbatch
options, Slurm's job records, the requests derived from measured costs, and the scripts."""

import json

import pytest

from autograder.cluster import costs, run, slurm


def test_sbatch_options_are_taken_in_long_form_and_never_the_graders_own():
    assert slurm.options(["--partition=short --account=cs101", "--exclusive"]) == {
        "partition": "short", "account": "cs101", "exclusive": None}
    with pytest.raises(ValueError, match="long form"):
        slurm.options(["-p short"])
    with pytest.raises(ValueError, match="sets --dependency itself"):
        slurm.options(["--dependency=afterok:1"])
    with pytest.raises(ValueError, match="sets --array itself"):
        slurm.options(["--array=1-3"])


def test_times_sizes_and_arrays_read_as_slurm_writes_them():
    assert [slurm.minutes(t) for t in ("90", "30:00", "0:30", "1:30:00", "2-12",
                                       "1-00:00:01")] == [90, 30, 1, 90, 3600, 1441]
    assert slurm.clock(1441) == "1-00:01:00" and slurm.clock(75) == "01:15:00"
    assert [slurm.megabytes(m) for m in ("16G", "500M", "2048", "1T")] == [
        16384, 500, 2048, 1024**2]
    with pytest.raises(ValueError, match="--time must be"):
        slurm.minutes("soon")
    assert slurm.array_spec([7, 1, 2, 3, 9, 10]) == "1-3,7,9-10"
    assert slurm._indices("1-3,7,9-13:2") == [1, 2, 3, 7, 9, 11, 13]


def test_a_job_array_record_gives_every_task_its_state():
    """``scontrol show job -o``: a task that ran has its own record; tasks not yet started
    share one (its ArrayTaskId a range, with a limit of running tasks after %)."""
    ran = slurm._from_fields({"JobId": "13", "ArrayJobId": "10", "ArrayTaskId": "3",
                              "JobState": "TIMEOUT", "ExitCode": "0:15"})
    waiting = slurm._from_fields({"JobId": "10", "ArrayJobId": "10", "ArrayTaskId": "4-6%2",
                                  "JobState": "PENDING"})
    assert ran == {"10_3": slurm.Job("10_3", "TIMEOUT", 0, 15, 3)}
    assert ran["10_3"].ended and ran["10_3"].describe() == "TIMEOUT (signal 15)"
    assert sorted(waiting) == ["10_4", "10_5", "10_6"] and not waiting["10_5"].ended
    single = slurm._from_fields({"JobId": "11", "JobState": "FAILED", "ExitCode": "1:0"})
    assert single["11"].describe() == "FAILED (exit code 1)"


def test_requests_hold_every_workers_memory_cap_and_a_hung_notebook():
    each = costs.cost("01_language_models")
    req = costs.request("01_language_models", shard=100, workers=4, memory_cap_mb=2048,
                        timeout_notebook=300, class_size=400)
    assert req.cpus == 4 and req.memory_cap_mb == 2048
    grader = costs.GRADER_MB + costs.similarity_mb(400, 100)
    assert req.mem_mb == grader + 4 * (costs.WORKER_MB + 2048)
    assert req.minutes * 60 >= 300 + 2 * 25 * each.cpu_seconds
    more = costs.request("01_language_models", shard=3000, workers=4, memory_cap_mb=2048,
                         timeout_notebook=300, class_size=6000)
    assert more.minutes > req.minutes == costs.MIN_MINUTES and more.mem_mb > req.mem_mb
    # an instructor's --mem lowers the per-submission cap to what it leaves each worker
    fitted = costs.request("01_language_models", shard=100, workers=4, memory_cap_mb=2048,
                           timeout_notebook=300, class_size=400, mem_mb=6000)
    assert fitted.mem_mb == 6000
    assert fitted.memory_cap_mb == (6000 - grader) // 4 - costs.WORKER_MB
    with pytest.raises(ValueError, match="too little for 4 worker"):
        costs.request("01_language_models", shard=100, workers=4, memory_cap_mb=2048,
                      timeout_notebook=300, class_size=400, mem_mb=1000)
    # the similarity report of a big class: every task holds the class's fingerprints
    assert costs.similarity_mb(10_000, 100) > 10 * costs.similarity_mb(1_000, 10)
    # an assignment the course added later is sized as the dearest measured one
    assert costs.cost("09_new") == max(costs.MEASURED.values(), key=lambda c: c.cpu_seconds)


def test_the_scripts_say_what_they_run_and_submit_the_merge_after_any_end(tmp_path):
    from autograder.course import COURSE

    request = costs.request("07_bleu", 10, 2, 1024, 60, 30)
    job = run.Run("07_bleu", str(tmp_path), 3, 2, 30, {**request.__dict__},
                  {"partition": "short", "time": "2:00:00"})
    run.write_scripts(job, COURSE, tmp_path / "export.zip", ["--memory-mb", "1024"], 1500, 10)
    grade = (tmp_path / "slurm" / "grade.sbatch").read_text()
    merge = (tmp_path / "slurm" / "merge.sbatch").read_text()
    submit = (tmp_path / "slurm" / "submit.sh").read_text()
    assert "#SBATCH --array=1-3" in grade and "#SBATCH --partition=short" in grade
    assert "#SBATCH --time=2:00:00" in grade and "#SBATCH --time=00:" not in grade
    assert f"#SBATCH --mem={request.mem_mb}M" in grade
    assert "--shard $SLURM_ARRAY_TASK_ID/3 --workers 2 --memory-mb 1024" in grade
    assert f"--out {tmp_path / 'shards'}/$SLURM_ARRAY_TASK_ID" in grade
    assert "#SBATCH --partition=short" in merge and "2:00:00" not in merge
    assert f"--resume-with 'python -m autograder slurm --resume {tmp_path}'" in merge
    assert "--dependency=afterany:$array merge.sbatch" in submit and "afterok" not in submit
    json.dumps(job.__dict__)  # what slurm.json keeps is plain data
