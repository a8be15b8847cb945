"""Helpers the tests share for reading and filling nbgrader cells."""


def solution_code(source):
    """An answer cell as a student who solved it would leave it: the solution, unmarked."""
    return "\n".join(line for line in source.splitlines()
                     if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)


def cell_with_id(nb, grade_id):
    """The one cell of ``nb`` whose nbgrader grade_id is ``grade_id``."""
    (cell,) = [cell for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell
