"""What AWS will decide with the policies a stack writes: the request-path table
(paths.py), the stack's policies read from its preview report (stack.py), each path as the
evaluator's input (requests.py), and the real evaluator (evaluator.py, Node)."""
