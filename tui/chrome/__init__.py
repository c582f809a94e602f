"""What frames every view: the keys (and the page written from them), the footer and
the modal screens."""
