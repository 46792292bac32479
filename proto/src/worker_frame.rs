//! The framing of the executor <-> worker conversation on a worker's Unix socket: each
//! frame is a [`LENGTH_PREFIX_BYTES`]-byte big-endian length, then that many bytes of one
//! prost message (`ToWorker` from the executor, `FromWorker` from the worker).
//!
//! This is the one definition of the framing: the worker (blocking I/O) uses
//! [`read_frame`] / [`write_frame`], the executor (tokio) builds its length-delimited
//! codec from [`LENGTH_PREFIX_BYTES`] and [`MAX_FRAME_BYTES`].
//!
//! Invariant: a length over [`MAX_FRAME_BYTES`] is refused before anything is
//! allocated for it; a message over it is refused before anything is written.

use std::io::{ErrorKind, Read, Write};

/// Bytes of the length prefix (a big-endian `u32`).
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Largest frame either side accepts or sends (a task result can be large).
pub const MAX_FRAME_BYTES: usize = 512 << 20;

/// Writes one frame holding `message`.
pub fn write_frame(w: &mut impl Write, message: &[u8]) -> Result<(), String> {
    if message.len() > MAX_FRAME_BYTES {
        return Err(format!(
            "a frame of {} bytes exceeds the limit of {MAX_FRAME_BYTES}",
            message.len()
        ));
    }
    w.write_all(&(message.len() as u32).to_be_bytes())
        .and_then(|_| w.write_all(message))
        .and_then(|_| w.flush())
        .map_err(|e| format!("cannot write a frame: {e}"))
}

/// Reads one frame; `None` at a clean end of stream (before a length prefix).
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, String> {
    let mut len = [0u8; LENGTH_PREFIX_BYTES];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(format!("cannot read a frame: {e}")),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(format!(
            "a frame of {len} bytes exceeds the limit of {MAX_FRAME_BYTES}"
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)
        .map_err(|e| format!("short frame ({len} bytes announced): {e}"))?;
    Ok(Some(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_oversized_or_short_ones_are_refused() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").unwrap();
        write_frame(&mut buf, b"").unwrap();
        assert_eq!(&buf[..4], &5u32.to_be_bytes());
        let mut r = std::io::Cursor::new(buf);
        assert_eq!(read_frame(&mut r).unwrap(), Some(b"hello".to_vec()));
        assert_eq!(read_frame(&mut r).unwrap(), Some(Vec::new()));
        assert_eq!(read_frame(&mut r).unwrap(), None);

        let too_long = ((MAX_FRAME_BYTES + 1) as u32).to_be_bytes().to_vec();
        let err = read_frame(&mut std::io::Cursor::new(too_long)).unwrap_err();
        assert_eq!(
            err,
            format!(
                "a frame of {} bytes exceeds the limit of {MAX_FRAME_BYTES}",
                MAX_FRAME_BYTES + 1
            )
        );
        let err = read_frame(&mut std::io::Cursor::new(vec![0, 0, 0, 9, 1, 2])).unwrap_err();
        assert!(err.starts_with("short frame (9 bytes announced)"), "{err}");
    }
}
