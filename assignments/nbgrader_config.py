"""nbgrader configuration of the course. The autograder copies this folder into a working
course directory per run, so grading never writes into the repository."""

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "seqlab"
c.CourseDirectory.root = "."
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.Execute.timeout = 30  # seconds per cell
c.Autograde.create_student = True
# A student who deletes a test cell must not escape it: put it back from the gradebook.
c.OverwriteCells.add_missing_cells = True
