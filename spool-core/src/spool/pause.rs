//! The "pause before publish" test seam: every later stage in this process
//! waits, its temp file written and fsynced, until a release file exists.

use std::path::Path;
#[cfg(any(test, feature = "testing"))]
use std::sync::PoisonError;

use crate::Error;

#[cfg(any(test, feature = "testing"))]
static PAUSE: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

/// Blocks a stage (its temp file written and fsynced, not published)
/// until the configured release file exists.
#[cfg(any(test, feature = "testing"))]
pub(super) fn pause_before_publish(temp: &Path) {
    let release = PAUSE.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(release) = release {
        tracing::info!(temp = %temp.display(), release = %release.display(), "stage paused before publish");
        while !release.exists() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Nothing in a build without test seams.
#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(super) fn pause_before_publish(_temp: &Path) {}

/// Makes every later stage in this process pause just before its publish
/// (temp file written and fsynced) until `release_file` exists, or stops
/// pausing (`None`). A test seam: in a build without the `testing` feature
/// it returns [`Error::NoTestSeams`].
pub fn set_pause_before_publish(release_file: Option<&Path>) -> Result<(), Error> {
    #[cfg(any(test, feature = "testing"))]
    {
        *PAUSE.lock().unwrap_or_else(PoisonError::into_inner) = release_file.map(Path::to_path_buf);
        Ok(())
    }
    #[cfg(not(any(test, feature = "testing")))]
    {
        let _ = release_file;
        Err(Error::NoTestSeams {
            seam: "pause before publish",
        })
    }
}
