//! The tally coordinator (grows with the runner).
