//! The pack format's version: what this build writes and reads (a leaf
//! module, so the errors that name it need not import the pack code).

/// The major version this crate writes and the only one it reads.
pub const VERSION_MAJOR: u16 = 1;
/// The minor version this crate writes. Readers accept any minor version of
/// a major version they know (minor versions only add what old readers may
/// ignore: see the crate docs).
pub const VERSION_MINOR: u16 = 0;
