"""Post-deploy acceptance checks: does the cluster a stack built really work?

Every check is a plain function over data: Kubernetes objects as the API returns them
(`cluster`), files and command outputs read from one node (`node`), and what the stack
says the cluster should hold (`expect`, from the stack file and the instance catalog).
`live` reads that data from a real cluster; the tests in tests/acceptance call the same
checks on it after `pulumi up`, and tests/unit proves them on recorded fixtures.

A check returns a list of problems, one readable line each; an empty list means it passed.
"""
