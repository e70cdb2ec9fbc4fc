//! The tally worker (grows with the runner).
