//! The postcard flavor a frame encoder serialises records with: appending into a borrowed
//! `Vec` (the pending frame), copying the short slices postcard writes for every varint
//! inline instead of calling memcpy.
//!
//! Invariant: only the bytes postcard wrote become part of the vector; a failed
//! serialisation leaves them for the caller to truncate.

use postcard::ser_flavors::Flavor;

/// postcard flavor appending into a borrowed `Vec` (`to_extend` takes the Vec by value and
/// would drop every pending record along with it on a serialisation error).
pub(crate) struct AppendFlavor<'a>(pub(crate) &'a mut Vec<u8>);

impl Flavor for AppendFlavor<'_> {
    type Output = ();

    #[inline]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        // postcard writes every varint (at most 10 bytes) through here; a call to memcpy
        // per field was 9 % of parquet_etl's time (profile: `__memmove_avx512_unaligned_erms`
        // under `try_push_varint_u64`). Short slices are copied inline.
        let n = data.len();
        if n > 16 {
            self.0.extend_from_slice(data);
            return Ok(());
        }
        self.0.reserve(16);
        let (src, len) = (data.as_ptr(), self.0.len());
        // SAFETY: `reserve(16)` leaves room for 16 bytes past `len`, and every write
        // below lands in `len..len + 16`; every read is within `data` (the two u64 reads
        // overlap when 8 < n < 16, as in a small memcpy). Only the first `n` bytes past
        // `len` become part of the vector; the rest of a u64 write is spare capacity.
        unsafe {
            let dst = self.0.as_mut_ptr().add(len);
            if n < 8 {
                // A varint, just written byte by byte into postcard's stack buffer:
                // gathered with byte loads, which forward from those stores (a wider
                // load of them stalls: 80 % of this function's samples did).
                let mut v = 0u64;
                for i in 0..n {
                    v |= u64::from(*src.add(i)) << (8 * i);
                }
                dst.cast::<u64>().write_unaligned(v);
            } else {
                let (a, b) = (src.cast::<u64>(), src.add(n - 8).cast::<u64>());
                let (a, b) = (a.read_unaligned(), b.read_unaligned());
                dst.cast::<u64>().write_unaligned(a);
                dst.add(n - 8).cast::<u64>().write_unaligned(b);
            }
            self.0.set_len(len + n);
        }
        Ok(())
    }

    #[inline]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    #[inline]
    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_flavor_appends_exactly_the_bytes_of_every_length() {
        let source: Vec<u8> = (1..=40).collect();
        for prefix in [0usize, 1, 7, 15, 16, 17] {
            for n in 0..=source.len() {
                let mut out: Vec<u8> = (100..100 + prefix as u8).collect();
                let mut flavor = AppendFlavor(&mut out);
                flavor.try_extend(&source[..n]).unwrap();
                flavor.try_extend(&source[n..]).unwrap();
                let mut want: Vec<u8> = (100..100 + prefix as u8).collect();
                want.extend_from_slice(&source);
                assert_eq!(out, want, "prefix {prefix}, split at {n}");
            }
        }
    }
}
