"""What a dropped chunk leaves behind: `represents` on its keeper, delta chunks."""
