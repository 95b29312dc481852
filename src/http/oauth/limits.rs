//! The keys the sign-in routes count under (their counters are
//! [`crate::auth::throttle::Windows`]).

use std::net::IpAddr;

/// The key an address counts under: IPv4 as it is, IPv6 by its /64 (one
/// customer's network: a host there has 2^64 addresses to rotate through).
pub fn network_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::throttle::Windows;
    use std::time::Duration;

    #[test]
    fn counts_per_key_and_ipv6_by_its_64() {
        let w = Windows::new(2, Duration::from_secs(60));
        let a = network_of("2001:db8:1:2::5".parse().unwrap());
        let b = network_of("2001:db8:1:2:ffff::9".parse().unwrap());
        assert_eq!(a, b, "one /64");
        assert!(w.take(a).is_ok());
        assert!(w.take(b).is_ok());
        assert!(w.take(a).is_err());
        let other = network_of("2001:db8:1:3::5".parse().unwrap());
        assert!(w.take(other).is_ok());
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(network_of(v4), v4);
    }
}
