//! The models' arena: blocks placed in segments or expandable ranges by
//! each model's rules, the pages under them, and the `plan` model's
//! placement by lifetimes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{
    Model, GAP, LARGE_PAGE, LARGE_ROUND, PAGE, PLAN_LIMIT, RANGE, ROUND, SMALL, SMALL_PAGE, SMALL_SEGMENT,
};

/// Which free blocks a request may take: one device, one stream, small or
/// large.
type PoolKey = (u32, Option<u32>, bool);

struct Block {
    size: u64,
    free: bool,
    /// The first address of the block's segment (or expandable range).
    segment: u64,
    pool: PoolKey,
}

#[derive(Default)]
struct Pool {
    /// Free blocks by (size, address): the first at or above a size is the
    /// best fit.
    free: BTreeSet<(u64, u64)>,
    /// Expandable models: the range's start, the end of its blocks, and the
    /// bytes mapped from the start.
    base: u64,
    top: u64,
    mapped: u64,
}

pub(super) struct Arena {
    pub(super) model: Model,
    pools: HashMap<PoolKey, Pool>,
    /// Every block, free or not, by simulated address.
    blocks: BTreeMap<u64, Block>,
    next_address: u64,
    pub(super) reserved: u64,
    pub(super) peak: u64,
    pub(super) grows: u64,
    /// The `pages` and `remap` models: live blocks over each page.
    page_users: HashMap<u64, u32>,
    /// The `remap` model: the pages mapped, those of them under no live
    /// block, how many pages are live now and at most, and the remaps.
    mapped_pages: HashSet<u64>,
    idle_pages: BTreeSet<u64>,
    live_pages: u64,
    max_live_pages: u64,
    pub(super) remaps: u64,
    pub(super) remaps_late: u64,
    /// Whether the replay is in the second half of the trace.
    pub(super) late: bool,
    /// The `plan` model: every block's lifetime (event indices) and size,
    /// by pool; the replay's current event.
    lifetimes: Vec<Lifetime>,
    pub(super) now: u64,
}

/// A block of the `plan` model.
struct Lifetime {
    start: u64,
    end: u64,
    size: u64,
    pool: (u32, Option<u32>),
}

fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

fn out_of_addresses() -> String {
    "the trace has more streams and segments than the models' address space holds".into()
}

fn request_size(bytes: u64) -> u64 {
    round_up(bytes.max(1), ROUND)
}

fn should_split(model: Model, small: bool, rest: u64) -> bool {
    if small || model.shared_segments().is_none() {
        rest >= ROUND
    } else {
        rest > SMALL
    }
}

impl Arena {
    pub(super) fn new(model: Model) -> Arena {
        Arena {
            model,
            pools: HashMap::new(),
            blocks: BTreeMap::new(),
            next_address: GAP,
            reserved: 0,
            peak: 0,
            grows: 0,
            page_users: HashMap::new(),
            mapped_pages: HashSet::new(),
            idle_pages: BTreeSet::new(),
            live_pages: 0,
            max_live_pages: 0,
            remaps: 0,
            remaps_late: 0,
            late: false,
            lifetimes: Vec::new(),
            now: 0,
        }
    }

    fn counts_pages(&self) -> bool {
        matches!(self.model, Model::Pages | Model::Remap { .. })
    }

    fn hold(&mut self, more: u64) {
        self.reserved += more;
        self.peak = self.peak.max(self.reserved);
        self.grows += 1;
    }

    /// Allocates `bytes` on `stream` of `device`; returns the simulated
    /// address.
    pub(super) fn allocate(&mut self, device: u32, stream: Option<u32>, bytes: u64) -> Result<u64, String> {
        let size = request_size(bytes);
        if self.model == Model::Plan {
            self.lifetimes.push(Lifetime {
                start: self.now,
                end: u64::MAX,
                size,
                pool: (device, stream),
            });
            return Ok(self.lifetimes.len() as u64 - 1);
        }
        let small = size <= SMALL;
        let key = (device, stream, small);
        let pool = self.pools.entry(key).or_default();
        let fit = pool.free.range((size, 0)..).next().copied();
        let addr = match (fit, self.model.shared_segments()) {
            (Some((block_size, addr)), _) => {
                pool.free.remove(&(block_size, addr));
                addr
            }
            (None, Some((shared, limit))) => {
                let segment = if small {
                    SMALL_SEGMENT
                } else if size < limit {
                    shared.max(round_up(size, LARGE_ROUND))
                } else {
                    round_up(size, LARGE_ROUND)
                };
                let addr = self.next_address;
                self.next_address = self
                    .next_address
                    .checked_add(round_up(segment, GAP) + GAP)
                    .ok_or_else(out_of_addresses)?;
                self.blocks.insert(
                    addr,
                    Block {
                        size: segment,
                        free: false,
                        segment: addr,
                        pool: key,
                    },
                );
                self.hold(segment);
                addr
            }
            (None, None) => self.grow_range(key, size)?,
        };
        self.take(addr, size, small);
        Ok(addr)
    }

    /// Expandable models: room for `size` at the end of the pool's range.
    fn grow_range(&mut self, key: PoolKey, size: u64) -> Result<u64, String> {
        let pool = self.pools.get_mut(&key).expect("the pool was made by allocate");
        if pool.base == 0 {
            pool.base = self.next_address;
            pool.top = pool.base;
            self.next_address = self
                .next_address
                .checked_add(RANGE)
                .ok_or_else(out_of_addresses)?;
        }
        let (base, top) = (pool.base, pool.top);
        if top - base + size > RANGE {
            return Err(format!(
                "a stream's blocks outgrow the {} TiB the models give a stream",
                RANGE >> 40
            ));
        }
        // The blocks tile [base, top): the last one ends at `top`. A free
        // last block is smaller than `size` (else it was a fit): it grows.
        let last = self
            .blocks
            .range(base..top)
            .next_back()
            .filter(|(_, b)| b.free)
            .map(|(&a, b)| (a, b.size));
        let addr = match last {
            Some((addr, old)) => {
                pool.free.remove(&(old, addr));
                self.blocks.get_mut(&addr).expect("listed").size = size;
                addr
            }
            None => {
                self.blocks.insert(
                    top,
                    Block {
                        size,
                        free: false,
                        segment: base,
                        pool: key,
                    },
                );
                top
            }
        };
        pool.top = addr + size;
        if self.model == Model::Expandable {
            let page = if key.2 { SMALL_PAGE } else { LARGE_PAGE };
            let need = round_up(pool.top - base, page);
            if need > pool.mapped {
                let more = need - pool.mapped;
                pool.mapped = need;
                self.hold(more);
            }
        }
        Ok(addr)
    }

    /// Marks the block at `addr` used for `size` bytes, splitting off the
    /// rest where the rules say so.
    fn take(&mut self, addr: u64, size: u64, small: bool) {
        let block = self.blocks.get_mut(&addr).expect("a block was found or made");
        block.free = false;
        let rest = block.size - size;
        let (segment, key) = (block.segment, block.pool);
        if should_split(self.model, small, rest) {
            block.size = size;
            self.blocks.insert(
                addr + size,
                Block {
                    size: rest,
                    free: true,
                    segment,
                    pool: key,
                },
            );
            self.free_list(key).insert((rest, addr + size));
        }
        let used = self.blocks[&addr].size;
        if self.counts_pages() {
            self.count_pages(addr, used, true);
        }
        if let Model::Remap { slack } = self.model {
            self.map_pages(addr, used, slack / PAGE);
        }
    }

    /// The remap model: maps the pages under a new block that are not
    /// mapped, each with a new page while the arena is within its slack,
    /// else with an idle page.
    fn map_pages(&mut self, addr: u64, size: u64, slack_pages: u64) {
        for page in addr / PAGE..(addr + size).div_ceil(PAGE) {
            if self.mapped_pages.contains(&page) {
                continue;
            }
            let over_slack = self.reserved / PAGE >= self.max_live_pages + slack_pages;
            let victim = if over_slack {
                self.idle_pages.pop_last()
            } else {
                None
            };
            match victim {
                Some(victim) => {
                    self.mapped_pages.remove(&victim);
                    self.remaps += 1;
                    self.remaps_late += u64::from(self.late);
                }
                None => self.hold(PAGE),
            }
            self.mapped_pages.insert(page);
        }
    }

    /// Counts the live blocks over each page of a block that begins
    /// (`up`) or ends. The pages model holds exactly the pages with users;
    /// the remap model notes which mapped pages are idle.
    fn count_pages(&mut self, addr: u64, size: u64, up: bool) {
        let bound = self.model == Model::Pages;
        for page in addr / PAGE..(addr + size).div_ceil(PAGE) {
            let users = self.page_users.entry(page).or_insert(0);
            if up {
                *users += 1;
                if *users == 1 {
                    self.live_pages += 1;
                    self.idle_pages.remove(&page);
                    if bound {
                        self.hold(PAGE);
                    }
                }
            } else {
                *users -= 1;
                if *users == 0 {
                    self.page_users.remove(&page);
                    self.live_pages -= 1;
                    if bound {
                        self.reserved -= PAGE;
                    } else if self.mapped_pages.contains(&page) {
                        self.idle_pages.insert(page);
                    }
                }
            }
        }
        self.max_live_pages = self.max_live_pages.max(self.live_pages);
    }

    /// Frees the block at `addr`, merging it with free neighbours of its
    /// segment.
    pub(super) fn free(&mut self, addr: u64) {
        if self.model == Model::Plan {
            self.lifetimes[addr as usize].end = self.now;
            return;
        }
        let (mut size, segment, key) = {
            let b = &self.blocks[&addr];
            (b.size, b.segment, b.pool)
        };
        if self.counts_pages() {
            self.count_pages(addr, size, false);
        }
        let mut start = addr;
        let next = addr + size;
        if let Some(n) = self.blocks.get(&next).filter(|n| n.free && n.segment == segment) {
            let n_size = n.size;
            self.free_list(key).remove(&(n_size, next));
            self.blocks.remove(&next);
            size += n_size;
        }
        let prev = self
            .blocks
            .range(..addr)
            .next_back()
            .filter(|(&a, p)| p.free && p.segment == segment && a + p.size == addr)
            .map(|(&a, p)| (a, p.size));
        if let Some((p_addr, p_size)) = prev {
            self.free_list(key).remove(&(p_size, p_addr));
            self.blocks.remove(&addr);
            start = p_addr;
            size += p_size;
        }
        let block = self.blocks.get_mut(&start).expect("the merged block");
        block.size = size;
        block.free = true;
        self.free_list(key).insert((size, start));
    }

    /// The `plan` model, after the replay: places each pool's blocks, the
    /// largest first, each at the lowest offset that no block living at the
    /// same time holds; each pool's arena is its highest end, rounded up to
    /// 2 MiB.
    pub(super) fn plan(&mut self) -> Result<(), String> {
        let mut pools: BTreeMap<(u32, Option<u32>), Vec<usize>> = BTreeMap::new();
        for (i, l) in self.lifetimes.iter().enumerate() {
            pools.entry(l.pool).or_default().push(i);
        }
        for (pool, mut blocks) in pools {
            if blocks.len() > PLAN_LIMIT {
                return Err(format!(
                    "the plan model places at most {PLAN_LIMIT} blocks a stream; stream {} of device {} has {}",
                    pool.1.map_or_else(|| "(none)".to_string(), |s| s.to_string()),
                    pool.0,
                    blocks.len()
                ));
            }
            let l = &self.lifetimes;
            blocks.sort_by_key(|&i| (std::cmp::Reverse(l[i].size), l[i].start));
            // (start, end, offset, size) of the blocks placed so far.
            let mut placed: Vec<(u64, u64, u64, u64)> = Vec::with_capacity(blocks.len());
            let mut top = 0;
            let mut taken: Vec<(u64, u64)> = Vec::new();
            for i in blocks {
                let b = &l[i];
                taken.clear();
                taken.extend(
                    placed
                        .iter()
                        .filter(|p| p.0 < b.end && b.start < p.1)
                        .map(|p| (p.2, p.2 + p.3)),
                );
                taken.sort_unstable();
                let mut offset = 0;
                for &(from, to) in &taken {
                    if offset + b.size <= from {
                        break;
                    }
                    offset = offset.max(to);
                }
                placed.push((b.start, b.end, offset, b.size));
                top = top.max(offset + b.size);
            }
            self.hold(round_up(top, PAGE));
        }
        Ok(())
    }

    /// The free blocks of a pool that has blocks.
    fn free_list(&mut self, key: PoolKey) -> &mut BTreeSet<(u64, u64)> {
        &mut self.pools.get_mut(&key).expect("a block's pool exists").free
    }
}
