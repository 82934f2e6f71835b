//! Harness for the end-to-end tests in `tests/tests/`: finding the real
//! `spool` binary, scratch directories, real-server addresses.
#![forbid(unsafe_code)]
