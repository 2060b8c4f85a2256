# The grading image: `python -m autograder` in a container, for instructors on macOS or Windows
# (Docker Desktop) and on shared servers. README, "Grading in Docker", says how to run it.
#   docker build -t seqlab-grader .
# Docker's default capabilities deny bubblewrap its namespaces, so grading here uses the uid
# fallback (`docker run --rm seqlab-grader doctor` says so): each sandbox runs as an
# unprivileged uid of its own, and nothing of the grader's may be readable to it. The course
# is made root's alone below; mount the export and the output under /grading, which only root
# may enter, so that the sandboxes cannot reach them whatever their permissions on your disk.
FROM python:3.12-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /course
COPY pyproject.toml README.md ./
COPY lib lib
COPY autograder autograder
COPY assignments assignments

# The CPU build of torch (the grader needs no GPU): a tenth of the CUDA build's size.
RUN pip install --no-cache-dir torch --index-url https://download.pytorch.org/whl/cpu \
    && pip install --no-cache-dir ".[grader]" \
    && python -m autograder hide-withheld \
    && chmod -R go-rwx /course \
    && mkdir -m 0700 /grading

WORKDIR /grading
ENTRYPOINT ["python", "-m", "autograder", "--course", "/course/assignments"]
CMD ["doctor"]
