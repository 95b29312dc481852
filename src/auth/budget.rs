//! What one client may hold while its request body is read: the
//! [`BodyBudget`] of body bytes and places in flight, shared by all
//! requests, and the [`Ticket`] each request holds until its answer is made
//! (the guard that charges it is [`body_guard`](super::body::body_guard)).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The body limit of a request without a valid token (the sign-in forms,
/// a client registration): a few KiB in practice.
pub const ANONYMOUS_BODY: usize = 64 * 1024;
/// The body bytes all requests without a valid token may hold at once.
pub const ANONYMOUS_BUDGET: usize = 4 * 1024 * 1024;
/// The least the agents' budget holds.
const MIN_BUDGET: usize = 32 * 1024 * 1024;
/// One holder (a token, an address) may hold at most this fraction of a
/// budget, and at least one body of the largest size: one token, read-only
/// or not, cannot take the whole budget from the others.
pub const SHARE_OF: usize = 4;

/// Who a request counts against: its token, or, without a valid token, the
/// address it came from (an IPv6 address by its /64, which one host holds
/// whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holder {
    Token(i64),
    Address(IpAddr),
}

impl Holder {
    /// The holder for a request from `addr` without a valid token.
    pub fn address(addr: IpAddr) -> Holder {
        Holder::Address(address_group(addr))
    }
}

/// `addr` as the unit limits count: an IPv4 address as it is, an IPv6
/// address by its /64 (one host, or one LAN, gets a whole /64).
pub fn address_group(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// A budget of body bytes: a semaphore whose permits are bytes, and the
/// most one holder may take of it.
struct Pool {
    bytes: Arc<Semaphore>,
    share: usize,
}

impl Pool {
    fn new(total: usize, largest: usize) -> Pool {
        let total = total.min(Semaphore::MAX_PERMITS);
        Pool {
            bytes: Arc::new(Semaphore::new(total)),
            share: (total / SHARE_OF).max(largest).min(total),
        }
    }
}

/// What a holder has in flight right now.
#[derive(Default)]
struct Usage {
    requests: usize,
    bytes: usize,
}

/// The body bytes requests may hold in memory at once (the agents' budget
/// and the anonymous one), and what each holder has in flight.
pub struct BodyBudget {
    agents: Pool,
    anonymous: Pool,
    /// Requests in flight per holder; `0`: no cap.
    max_in_flight: usize,
    /// Only holders with something in flight have an entry, so its size is
    /// bounded by the requests in flight.
    holders: Mutex<HashMap<Holder, Usage>>,
}

/// Why a request was refused a place or bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The holder has `CHATROOM_MAX_IN_FLIGHT` requests in flight.
    InFlight,
    /// The holder's requests hold its share of the budget.
    Share,
    /// The budget is spent.
    Spent,
}

impl BodyBudget {
    /// The agents' budget holds sixteen of the largest bodies (`large`),
    /// and at least 32 MiB; the anonymous one [`ANONYMOUS_BUDGET`].
    pub fn new(large: usize, max_in_flight: usize) -> BodyBudget {
        BodyBudget {
            agents: Pool::new(large.saturating_mul(16).max(MIN_BUDGET), large),
            anonymous: Pool::new(ANONYMOUS_BUDGET, ANONYMOUS_BODY),
            max_in_flight,
            holders: Mutex::new(HashMap::new()),
        }
    }

    /// A place in flight for one request of `holder`.
    pub fn admit(self: &Arc<Self>, holder: Holder) -> Result<Ticket, Refusal> {
        let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        let usage = holders.entry(holder).or_default();
        if self.max_in_flight > 0 && usage.requests >= self.max_in_flight {
            return Err(Refusal::InFlight);
        }
        usage.requests += 1;
        Ok(Ticket {
            budget: self.clone(),
            holder,
            permit: None,
            bytes: 0,
        })
    }

    fn pool(&self, holder: Holder) -> &Pool {
        match holder {
            Holder::Token(_) => &self.agents,
            Holder::Address(_) => &self.anonymous,
        }
    }

    /// The bytes the budget of `holder`'s kind has left (for tests and the
    /// log).
    pub fn available(&self, holder: Holder) -> usize {
        self.pool(holder).bytes.available_permits()
    }
}

/// One request's place in flight and the body bytes it holds; both come
/// back when it is dropped (the answer is made, or the client went away).
pub struct Ticket {
    budget: Arc<BodyBudget>,
    holder: Holder,
    permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl Ticket {
    /// Grows what this request holds to `n` bytes, if its holder's share
    /// and the budget have them.
    pub fn cover(&mut self, n: usize) -> Result<(), Refusal> {
        if n <= self.bytes {
            return Ok(());
        }
        let more = n - self.bytes;
        let pool = self.budget.pool(self.holder);
        let mut holders = self
            .budget
            .holders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let usage = holders.entry(self.holder).or_default();
        if usage.bytes + more > pool.share {
            return Err(Refusal::Share);
        }
        let permits = u32::try_from(more).map_err(|_| Refusal::Spent)?;
        let got = pool
            .bytes
            .clone()
            .try_acquire_many_owned(permits)
            .map_err(|_| Refusal::Spent)?;
        match &mut self.permit {
            Some(p) => p.merge(got),
            None => self.permit = Some(got),
        }
        usage.bytes += more;
        self.bytes = n;
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        super::release(&self.budget.holders, &self.holder, |usage| {
            usage.requests = usage.requests.saturating_sub(1);
            usage.bytes = usage.bytes.saturating_sub(self.bytes);
            usage.requests == 0
        });
        // The permit goes back with the struct.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_takes_at_most_its_share_and_gives_it_back() {
        let budget = Arc::new(BodyBudget::new(1024 * 1024, 2));
        let alice = Holder::Token(1);
        let mut a = budget.admit(alice).unwrap();
        let share = budget.agents.share;
        assert!(a.cover(share).is_ok());
        let mut b = budget.admit(alice).unwrap();
        assert_eq!(b.cover(1), Err(Refusal::Share));
        assert_eq!(budget.admit(alice).err(), Some(Refusal::InFlight));
        // Another token has its own share.
        let mut c = budget.admit(Holder::Token(2)).unwrap();
        assert!(c.cover(share).is_ok());
        drop((a, b, c));
        assert!(budget.holders.lock().unwrap().is_empty());
        assert_eq!(
            budget.available(alice),
            (16 * 1024 * 1024usize).max(MIN_BUDGET)
        );
    }

    #[test]
    fn anonymous_requests_have_a_budget_of_their_own() {
        let budget = Arc::new(BodyBudget::new(1024 * 1024, 0));
        let mut held = Vec::new();
        for i in 0..=255u8 {
            let mut t = budget
                .admit(Holder::address(IpAddr::from([10, 0, 0, i])))
                .unwrap();
            if t.cover(ANONYMOUS_BODY).is_err() {
                break;
            }
            held.push(t);
        }
        assert_eq!(held.len(), ANONYMOUS_BUDGET / ANONYMOUS_BODY);
        // The agents' budget is untouched.
        let mut agent = budget.admit(Holder::Token(7)).unwrap();
        assert!(agent.cover(1024 * 1024).is_ok());
    }

    #[test]
    fn ipv6_counts_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_group(a), address_group(b));
        assert_ne!(address_group(a), address_group(c));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(
            address_group(mapped),
            "192.0.2.1".parse::<IpAddr>().unwrap()
        );
    }
}
