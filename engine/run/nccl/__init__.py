"""What NCCL itself says about a run: its flight recorder's collectives (who arrived late, who never
entered) and its own log (how the ranks talk). Read from files its ranks wrote, with a bound."""
