//! glibc's `memcpy` on AMD Zen 3 and later: no `rep movsb` for mid-sized copies.
//!
//! glibc's x86-64 `memcpy`/`memmove` switch from vector loops to `rep movsb` for copies from
//! `x86_rep_movsb_threshold` (2,112 bytes with AVX-512) up to the L2 cache's size. On AMD Zen 3
//! and Zen 4, `rep movsb` is many times slower than the vector loops when source and
//! destination are aligned differently (glibc bug 30994; later glibc releases stopped choosing
//! it on these cores). A TLS server hits that case on every record: rustls copies each
//! decrypted record from 5 bytes into its read buffer to a fresh allocation, and the record
//! layers and QUIC copy payload into packets at odd offsets. Measured on this project's build
//! machine (AMD EPYC, family 0x19 model 0x11, Debian's glibc 2.36), 200 MB curl uploads over
//! HTTP/2: `__memmove_avx512_unaligned_erms` was 29 % of the server's CPU time, 83 % of that on
//! its `rep movsb`; with the threshold raised, 4 %.
//!
//! The threshold is a glibc tunable, set with the others Sluice sets by running the binary
//! again ([`crate::tunables`]). A threshold already set is the operator's and is left alone
//! (that is also how to keep glibc's own choice).

/// The glibc tunable that sets where `rep movsb` starts.
pub const TUNABLE: &str = "glibc.cpu.x86_rep_movsb_threshold";

/// The threshold Sluice sets: above any L2 cache, where glibc stops using `rep movsb` for
/// larger copies anyway, so copies are never made with it.
pub const THRESHOLD: u64 = 1 << 30;

/// Whether this CPU is one whose `rep movsb` is slow for differently aligned copies: AMD,
/// family 0x19 (Zen 3, Zen 4) or later.
pub fn cpu_wants_tuning() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let (vendor, family) = cpu_vendor_and_family();
        amd_zen3_or_later(&vendor, family)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The vendor string and the (extended) family from CPUID leaves 0 and 1.
#[cfg(target_arch = "x86_64")]
fn cpu_vendor_and_family() -> ([u8; 12], u32) {
    use std::arch::x86_64::__cpuid;
    // CPUID leaves 0 and 1 exist on every x86-64 processor.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID reads identification registers and has no side effects.
    let (l0, l1) = unsafe { (__cpuid(0), __cpuid(1)) };
    let mut vendor = [0u8; 12];
    vendor[..4].copy_from_slice(&l0.ebx.to_le_bytes());
    vendor[4..8].copy_from_slice(&l0.edx.to_le_bytes());
    vendor[8..].copy_from_slice(&l0.ecx.to_le_bytes());
    // Family: bits 8–11; when that is 0xf, plus the extended family, bits 20–27.
    let base = (l1.eax >> 8) & 0xf;
    let family = if base == 0xf { base + ((l1.eax >> 20) & 0xff) } else { base };
    (vendor, family)
}

/// The rule on its own: AMD at family 0x19 or later.
pub fn amd_zen3_or_later(vendor: &[u8; 12], family: u32) -> bool {
    vendor == b"AuthenticAMD" && family >= 0x19
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_amd_from_family_0x19_on() {
        assert!(amd_zen3_or_later(b"AuthenticAMD", 0x19));
        assert!(amd_zen3_or_later(b"AuthenticAMD", 0x1a));
        assert!(!amd_zen3_or_later(b"AuthenticAMD", 0x17), "Zen 2 has no fast short rep movsb");
        assert!(!amd_zen3_or_later(b"GenuineIntel", 0x19));
    }
}
