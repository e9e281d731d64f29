"""The pure core: from validated inputs to results that carry their inputs. No I/O, no printing."""
