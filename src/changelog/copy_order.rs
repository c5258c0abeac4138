//! The order in which a rewrite's added files are compared with its removed files. The
//! walk that pairs copied rows (`copied`) compares both sides in file order, so it pairs
//! a file's copies only when the file that copies it comes at the same place; writers
//! list their new files in any order (Spark: as its tasks finish). A file and its
//! copy-on-write rewrite share most columns' bounds in their manifest entries, so each
//! added file is put in the place of the removed file it shares the most bounds with.
//! Only speed depends on it: cancelling is exact in any order.
//! Must not reach: `store`, `workers`.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use iceberg::spec::DataFile;

/// A fingerprint of each column's lower and upper bound in `file`'s manifest entry.
pub(super) fn bounds_of(file: &DataFile) -> Vec<u64> {
    let mut ids: Vec<&i32> = file.lower_bounds().keys().collect();
    ids.sort_unstable();
    ids.into_iter()
        .map(|id| {
            let bound = (id, &file.lower_bounds()[id], file.upper_bounds().get(id));
            FixedState::default().hash_one(bound)
        })
        .collect()
}

/// A bound that more removed files than this share says little of which one a file
/// copies (a column of few values), and would cost a vote for each of them.
const COMMON_BOUND: usize = 8;

/// A data file as the order sees it: its carryover group and [`bounds_of`] it.
pub(super) type Bounded<'a, G> = (&'a G, &'a [u64]);

/// The order of the `added` files (their indexes): each in the place of the removed file
/// of its group it shares the most bounds with, in `removed`'s order; files that share
/// none keep their order, after the others.
pub(super) fn copy_order<G: Eq>(removed: &[Bounded<G>], added: &[Bounded<G>]) -> Vec<usize> {
    let mut sharing: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, (_, bounds)) in removed.iter().enumerate() {
        for bound in *bounds {
            sharing.entry(*bound).or_default().push(i);
        }
    }
    let mut ranked: Vec<(usize, usize)> = added
        .iter()
        .enumerate()
        .map(|(j, (group, bounds))| {
            let mut votes: HashMap<usize, usize> = HashMap::new();
            for files in bounds.iter().filter_map(|b| sharing.get(b)) {
                if files.len() > COMMON_BOUND {
                    continue;
                }
                for &i in files.iter().filter(|&&i| removed[i].0 == *group) {
                    *votes.entry(i).or_default() += 1;
                }
            }
            let best = votes.into_iter().max_by_key(|&(i, n)| (n, Reverse(i)));
            (best.map_or(usize::MAX, |(i, _)| i), j)
        })
        .collect();
    ranked.sort_unstable();
    ranked.into_iter().map(|(_, j)| j).collect()
}

/// `files` in the order [`copy_order`] gives.
pub(super) fn reordered<T>(files: Vec<T>, order: &[usize]) -> Vec<T> {
    let mut slots: Vec<Option<T>> = files.into_iter().map(Some).collect();
    order.iter().filter_map(|&j| slots[j].take()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    type File = (&'static str, &'static str, Vec<u64>);

    fn file(path: &'static str, partition: &'static str, bounds: &[u64]) -> File {
        (path, partition, bounds.to_vec())
    }

    fn order(removed: &[File], added: &[File]) -> Vec<&'static str> {
        fn bounded(files: &[File]) -> Vec<Bounded<'_, &str>> {
            files.iter().map(|f| (&f.1, f.2.as_slice())).collect()
        }
        let order = copy_order(&bounded(removed), &bounded(added));
        reordered(added.iter().map(|f| f.0).collect(), &order)
    }

    #[test]
    fn added_files_follow_the_removed_files_they_copy() {
        let removed = [
            file("r1", "p", &[1, 2, 3]),
            file("r2", "p", &[4, 5, 6]),
            file("r3", "p", &[7, 8, 9]),
        ];
        // a3 rewrote r3 with one column's bounds changed, a1 r1, a2 r2; new is new.
        let added = [
            file("a3", "p", &[7, 80, 9]),
            file("new", "p", &[100, 101]),
            file("a1", "p", &[1, 2, 3]),
            file("a2", "p", &[4, 5, 60]),
        ];
        assert_eq!(order(&removed, &added), ["a1", "a2", "a3", "new"]);
    }

    #[test]
    fn only_files_of_the_same_partition_and_distinctive_bounds_count() {
        let removed = [file("r1", "p", &[1, 2]), file("r2", "q", &[3, 4])];
        // b shares r2's bounds but is in p: it copies nothing there.
        let added = [file("b", "p", &[3, 4]), file("a", "p", &[1, 2])];
        assert_eq!(order(&removed, &added), ["a", "b"]);
        // A bound every removed file has says nothing.
        let removed: Vec<File> = (0..20).map(|i| file("r", "p", &[0, 100 + i])).collect();
        let added = [file("x", "p", &[0]), file("y", "p", &[0, 105])];
        assert_eq!(order(&removed, &added), ["y", "x"]);
    }
}
