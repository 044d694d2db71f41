//! From pgoutput messages to changelog rows with exact positions.
//!
//! [`ChangeLog`] owns the rows received and not yet handed on, and the
//! [`Position`] after each of them. pgoutput (protocol 1) sends a
//! transaction only once it has committed, and its `Begin` names the LSN
//! of its commit record, so rows are handed on as they arrive, whatever
//! the transaction's size, and a position is always "every transaction
//! ending by `done`, and the first `rows` rows of the one committing at
//! `partial`". It must never hand on a row a restored position covers.

use std::collections::{HashMap, VecDeque};

use fv_postgres_wire::pgoutput::{Datum, Message, Relation, Tuple};
use fv_postgres_wire::replication::Lsn;

/// What a row's op column says.
pub const INSERT: &str = "insert";
/// An update's new row image.
pub const UPDATE: &str = "update";
/// A deleted key.
pub const DELETE: &str = "delete";

/// Where the source has got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// Every transaction ending at or before this LSN is handed on.
    pub done: Lsn,
    /// And the first `rows` rows of the transaction whose commit record
    /// is at this LSN.
    pub partial: Option<(Lsn, u64)>,
}

impl Position {
    /// `done partial rows` as text (`0/0` and 0 for no partial).
    pub fn encode(&self) -> Vec<u8> {
        let (end, rows) = self.partial.unwrap_or_default();
        format!("{} {end} {rows}", self.done).into_bytes()
    }

    /// The inverse of [`encode`](Self::encode).
    pub fn decode(bytes: &[u8]) -> Result<Position, String> {
        let bad = || {
            format!(
                "`{}` is not a postgres-cdc-source position",
                String::from_utf8_lossy(bytes)
            )
        };
        let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let parts: Vec<&str> = text.split(' ').collect();
        let [done, end, rows] = parts[..] else {
            return Err(bad());
        };
        let done: Lsn = done.parse().map_err(|_| bad())?;
        let end: Lsn = end.parse().map_err(|_| bad())?;
        let rows: u64 = rows.parse().map_err(|_| bad())?;
        Ok(Position {
            done,
            partial: (rows > 0).then_some((end, rows)),
        })
    }
}

/// One changelog row: its op and its values in the table's column order
/// (`None`: SQL NULL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// [`INSERT`], [`UPDATE`] or [`DELETE`].
    pub op: &'static str,
    /// The values as the server's text.
    pub values: Vec<Option<String>>,
    /// The position once this row is handed on.
    pub after: Position,
}

/// The table read: its columns by name, and which form its key.
#[derive(Debug, Clone)]
pub struct TableShape {
    /// `schema`, `table`.
    pub namespace: String,
    /// The table's name.
    pub name: String,
    /// Column names, in the output's order.
    pub columns: Vec<String>,
    /// Whether each column is part of the primary key.
    pub key: Vec<bool>,
}

/// Where each output column is in a relation's tuples.
type ColumnMap = Vec<Option<usize>>;

/// The transaction being received.
struct Transaction {
    /// Its commit record's LSN.
    commit: Lsn,
    /// Its rows received so far.
    seen: u64,
    /// How many of its first rows a restored position covers.
    skip: u64,
}

/// Transactions in, rows with positions out.
pub struct ChangeLog {
    table: TableShape,
    /// Relations of the table, by OID, mapped onto the output columns.
    relations: HashMap<u32, ColumnMap>,
    /// The transaction being received.
    open: Option<Transaction>,
    /// Rows received and not yet handed on.
    ready: VecDeque<Row>,
    /// The position after the last row queued (or restored).
    queued: Position,
    /// Truncations seen (logged by the caller).
    pub truncations: u64,
}

impl ChangeLog {
    /// A change log for `table`, resuming after `from`.
    pub fn new(table: TableShape, from: Position) -> ChangeLog {
        ChangeLog {
            table,
            relations: HashMap::new(),
            open: None,
            ready: VecDeque::new(),
            queued: from,
            truncations: 0,
        }
    }

    /// The table read.
    pub fn shape(&self) -> &TableShape {
        &self.table
    }

    /// Whether a transaction is being received.
    pub fn in_transaction(&self) -> bool {
        self.open.is_some()
    }

    /// Rows waiting to be handed on.
    pub fn ready(&self) -> usize {
        self.ready.len()
    }

    /// Take up to `n` rows.
    pub fn take(&mut self, n: usize) -> Vec<Row> {
        let n = n.min(self.ready.len());
        self.ready.drain(..n).collect()
    }

    /// Feed one message.
    pub fn apply(&mut self, message: Message) -> Result<(), String> {
        match message {
            Message::Begin { final_lsn, .. } => {
                // A transaction committing before `done` ends before it.
                let skip = match self.queued.partial {
                    _ if final_lsn < self.queued.done => u64::MAX,
                    Some((commit, rows)) if commit == final_lsn => rows,
                    _ => 0,
                };
                self.open = Some(Transaction {
                    commit: final_lsn,
                    seen: 0,
                    skip,
                });
            }
            Message::Relation(r) => self.relation(r),
            Message::Insert { relation, new } => {
                if let Some(map) = self.relations.get(&relation) {
                    let values = self.values(map, &new, None)?;
                    self.push(INSERT, values)?;
                }
            }
            Message::Update { relation, old, new } => {
                if let Some(map) = self.relations.get(&relation).cloned() {
                    let new_values = self.values(&map, &new, old.as_ref())?;
                    if let Some(old) = &old {
                        let old_values = self.values(&map, old, None)?;
                        if self.key_of(&old_values) != self.key_of(&new_values) {
                            // The key changed: the old key is gone.
                            let deleted = self.key_only(old_values);
                            self.push(DELETE, deleted)?;
                        }
                    }
                    self.push(UPDATE, new_values)?;
                }
            }
            Message::Delete { relation, old } => {
                if let Some(map) = self.relations.get(&relation) {
                    let values = self.values(map, &old, None)?;
                    let key = self.key_only(values);
                    self.push(DELETE, key)?;
                }
            }
            Message::Truncate { relations } => {
                if relations.iter().any(|r| self.relations.contains_key(r)) {
                    self.truncations += 1;
                }
            }
            Message::Commit { end_lsn, .. } => self.commit(end_lsn)?,
            Message::Other(_) => {}
        }
        Ok(())
    }

    fn relation(&mut self, r: Relation) {
        if r.namespace != self.table.namespace || r.name != self.table.name {
            return;
        }
        let map = self
            .table
            .columns
            .iter()
            .map(|c| r.columns.iter().position(|rc| &rc.name == c))
            .collect();
        self.relations.insert(r.oid, map);
    }

    /// A tuple's values in output order; an unchanged TOASTed value is
    /// taken from `old` when the server sent it (REPLICA IDENTITY FULL).
    fn values(
        &self,
        map: &ColumnMap,
        tuple: &Tuple,
        old: Option<&Tuple>,
    ) -> Result<Vec<Option<String>>, String> {
        map.iter()
            .enumerate()
            .map(|(i, at)| {
                let Some(at) = *at else {
                    return Ok(None);
                };
                match tuple.get(at) {
                    None | Some(Datum::Null) => Ok(None),
                    Some(Datum::Text(t)) => Ok(Some(String::from_utf8_lossy(t).into_owned())),
                    Some(Datum::Unchanged) => match old.and_then(|o| o.get(at)) {
                        Some(Datum::Text(t)) => Ok(Some(String::from_utf8_lossy(t).into_owned())),
                        _ => Err(format!(
                            "an update left the TOASTed value of `{}` unchanged, and the server does not send it: set REPLICA IDENTITY FULL on {}.{} so it does",
                            self.table.columns[i], self.table.namespace, self.table.name
                        )),
                    },
                }
            })
            .collect()
    }

    fn key_of<'a>(&self, values: &'a [Option<String>]) -> Vec<&'a Option<String>> {
        values
            .iter()
            .zip(&self.table.key)
            .filter(|(_, k)| **k)
            .map(|(v, _)| v)
            .collect()
    }

    fn key_only(&self, values: Vec<Option<String>>) -> Vec<Option<String>> {
        values
            .into_iter()
            .zip(&self.table.key)
            .map(|(v, k)| if *k { v } else { None })
            .collect()
    }

    fn push(&mut self, op: &'static str, values: Vec<Option<String>>) -> Result<(), String> {
        let open = self
            .open
            .as_mut()
            .ok_or("a row change outside a transaction")?;
        open.seen += 1;
        if open.seen <= open.skip {
            return Ok(());
        }
        let after = Position {
            done: self.queued.done,
            partial: Some((open.commit, open.seen)),
        };
        self.ready.push_back(Row { op, values, after });
        self.queued = after;
        Ok(())
    }

    /// The open transaction ended at `end`.
    fn commit(&mut self, end: Lsn) -> Result<(), String> {
        let open = self.open.take().ok_or("a commit outside a transaction")?;
        if open.skip != u64::MAX {
            self.queued = Position {
                done: end,
                partial: None,
            };
        }
        Ok(())
    }

    /// The position once everything queued is handed on.
    pub fn queued(&self) -> Position {
        self.queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fv_postgres_wire::pgoutput::RelationColumn;

    fn text(v: &str) -> Datum {
        Datum::Text(v.as_bytes().to_vec().into())
    }

    fn log(from: Position) -> ChangeLog {
        let mut log = ChangeLog::new(
            TableShape {
                namespace: "public".into(),
                name: "t".into(),
                columns: vec!["id".into(), "v".into()],
                key: vec![true, false],
            },
            from,
        );
        let column = |name: &str, key| RelationColumn {
            key,
            name: name.into(),
            type_oid: 23,
        };
        log.apply(Message::Relation(Relation {
            oid: 7,
            namespace: "public".into(),
            name: "t".into(),
            // The table's order differs from the output's: mapped by name.
            columns: vec![column("v", false), column("id", true)],
        }))
        .expect("relation");
        log
    }

    fn transaction(log: &mut ChangeLog, end: u64, ids: &[&str]) {
        log.apply(Message::Begin {
            final_lsn: Lsn(end - 1),
            xid: 1,
        })
        .expect("begin");
        for id in ids {
            log.apply(Message::Insert {
                relation: 7,
                new: vec![text("x"), text(id)],
            })
            .expect("insert");
        }
        log.apply(Message::Commit {
            commit_lsn: Lsn(end - 1),
            end_lsn: Lsn(end),
        })
        .expect("commit");
    }

    #[test]
    fn rows_come_as_received_with_the_position_after_each() {
        let mut log = log(Position::default());
        log.apply(Message::Begin {
            final_lsn: Lsn(99),
            xid: 1,
        })
        .expect("begin");
        log.apply(Message::Insert {
            relation: 7,
            new: vec![text("a"), text("1")],
        })
        .expect("insert");
        assert_eq!(
            log.ready(),
            1,
            "a committed transaction's row, before its end"
        );
        log.apply(Message::Commit {
            commit_lsn: Lsn(99),
            end_lsn: Lsn(100),
        })
        .expect("commit");
        transaction(&mut log, 200, &["2", "3"]);
        let rows = log.take(10);
        let values: Vec<_> = rows
            .iter()
            .map(|r| r.values[0].clone().expect("an id"))
            .collect();
        assert_eq!(values, ["1", "2", "3"]);
        assert_eq!(rows[1].values[1].as_deref(), Some("x"));
        let position = |done, partial| Position {
            done: Lsn(done),
            partial,
        };
        assert_eq!(
            rows.iter().map(|r| r.after).collect::<Vec<_>>(),
            [
                position(0, Some((Lsn(99), 1))),
                position(100, Some((Lsn(199), 1))),
                position(100, Some((Lsn(199), 2))),
            ]
        );
        assert_eq!(log.queued(), position(200, None));
        for r in &rows {
            assert_eq!(Position::decode(&r.after.encode()), Ok(r.after));
        }
    }

    #[test]
    fn a_restored_position_skips_what_it_covers() {
        // Resumed in the middle of the transaction committing at 199.
        let mut log = log(Position {
            done: Lsn(100),
            partial: Some((Lsn(199), 1)),
        });
        transaction(&mut log, 100, &["1"]);
        transaction(&mut log, 200, &["2", "3"]);
        transaction(&mut log, 300, &["4"]);
        let ids: Vec<_> = log
            .take(10)
            .into_iter()
            .map(|r| r.values[0].clone().expect("an id"))
            .collect();
        assert_eq!(ids, ["3", "4"]);
        // A transaction entirely before the position moves nothing back.
        let mut log = super::tests::log(Position {
            done: Lsn(300),
            partial: None,
        });
        transaction(&mut log, 200, &["2"]);
        assert_eq!((log.ready(), log.queued().done), (0, Lsn(300)));
    }

    #[test]
    fn a_changed_key_deletes_the_old_key_and_deletes_carry_only_keys() {
        let mut log = log(Position::default());
        log.apply(Message::Begin {
            final_lsn: Lsn(9),
            xid: 1,
        })
        .expect("begin");
        log.apply(Message::Update {
            relation: 7,
            old: Some(vec![Datum::Null, text("1")]),
            new: vec![text("b"), text("2")],
        })
        .expect("update");
        log.apply(Message::Delete {
            relation: 7,
            old: vec![text("b"), text("2")],
        })
        .expect("delete");
        // Another table's change is not ours.
        log.apply(Message::Insert {
            relation: 8,
            new: vec![text("z")],
        })
        .expect("insert");
        log.apply(Message::Commit {
            commit_lsn: Lsn(9),
            end_lsn: Lsn(10),
        })
        .expect("commit");
        let rows: Vec<_> = log.take(10).into_iter().map(|r| (r.op, r.values)).collect();
        assert_eq!(
            rows,
            [
                (DELETE, vec![Some("1".to_string()), None]),
                (UPDATE, vec![Some("2".to_string()), Some("b".to_string())]),
                (DELETE, vec![Some("2".to_string()), None]),
            ]
        );
    }

    #[test]
    fn an_unchanged_toast_value_without_the_old_row_is_refused_by_name() {
        let mut log = log(Position::default());
        log.apply(Message::Begin {
            final_lsn: Lsn(9),
            xid: 1,
        })
        .expect("begin");
        let e = log
            .apply(Message::Update {
                relation: 7,
                old: None,
                new: vec![Datum::Unchanged, text("1")],
            })
            .expect_err("refused");
        assert!(
            e.contains("`v`") && e.contains("REPLICA IDENTITY FULL"),
            "{e}"
        );
    }

    #[test]
    fn positions_that_are_not_ours_are_refused() {
        for bad in [
            &b""[..],
            b"0/0 0/0",
            b"x 0/0 0",
            b"0/0 0/0 -1",
            b"0/0 0/0 1 2",
        ] {
            assert!(Position::decode(bad).is_err(), "{bad:?}");
        }
    }
}
