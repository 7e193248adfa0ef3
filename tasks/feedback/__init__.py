"""What a person sees of a job: its status comment, check run and progress."""
