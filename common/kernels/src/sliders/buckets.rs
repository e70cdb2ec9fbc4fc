//! What the shards of a sliders frontier level send each other, as values:
//! the candidates of the next level and the tags that name each kind of
//! bucket in either form (`levels` writes the raw form, `forms` the compact
//! one; both read these).

/// Tag of a [`ForwardBucket`] whose candidates carry no moves back (as
/// written before they did; still read).
pub(super) const TAG_FORWARD_PLAIN: u8 = 1;
/// Tag of a [`ForwardBucket`] whose candidates carry their moves back.
pub(super) const TAG_FORWARD: u8 = 5;
/// Tag of a bucket of a level's boards.
pub(super) const TAG_MEMBERS: u8 = 2;
/// Tag of a bucket of neighbours of a graph level.
pub(super) const TAG_NEIGHBOURS: u8 = 3;

/// A board of the next level as one shard of a level sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Candidate {
    pub board: u64,
    /// Shortest sequences reaching it through the sender's boards.
    pub paths: u128,
    /// Bit `c` set: the move of code `c` leads from it back to one of the
    /// sender's boards. Those boards are in the level before its own, so its
    /// shard skips these moves instead of sending boards the next level
    /// would remove (0 says nothing).
    pub back: u8,
}

/// What one shard of a forward level sends one bucket of the next level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForwardBucket {
    /// Neighbours of the sender's boards, strictly increasing.
    pub candidates: Vec<Candidate>,
    /// The boards of the level before the sender's that it was handed.
    pub previous: Vec<u64>,
}
