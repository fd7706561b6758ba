"""An app with a model whose name nobody translated, installed only by its settings module, for
the test that `bin/messages --check` fails on a new model or field name."""
