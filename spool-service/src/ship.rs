//! [`Ship`]: who uploads and indexes an engine's packs, the value of
//! `service.ship` (the engine's module doc says the trade). A leaf: the
//! configuration's key table and the engine both name it.

/// Who ships an engine's packs: the value of `service.ship` (`crate::engine`'s module
/// doc says the trade).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ship {
    /// The engine's own service (`"self"`, the default).
    #[default]
    Itself,
    /// The node's daemon, through the hand-off (`"daemon"`).
    Daemon,
}

impl Ship {
    /// The value `service.ship` takes for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Ship::Itself => "self",
            Ship::Daemon => "daemon",
        }
    }
}
