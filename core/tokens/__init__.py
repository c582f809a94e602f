"""What the trainer sees of one message: its tokens and every per-token stream placed
on them (`streams`), a summary of them (`summary`), and their text from the model's
own tokenizer, found offline (`tokenizer`)."""
