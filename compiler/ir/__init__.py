"""The typed tensor IR: data structures, op table, printer, verifier, interpreter."""
