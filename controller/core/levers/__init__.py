"""Every lever, planned by pure code: the table of how each is carried out, and one module per
lever family (bands, starts, preemption, handoffs, colocation). No I/O."""
