//! The two pieces of Flink SQL that sqlparser does not read, taken out of
//! the text before it parses: `WATERMARK FOR col AS expr` in a `CREATE
//! TABLE` column list (recorded, then blanked) and the `TABLE` keyword of a
//! table argument (`HOP(TABLE bid, …)`, blanked). Blanking writes spaces
//! over the bytes, so every offset in the rewritten text is the offset in
//! the user's file and positions in later messages stay true.
//!
//! This module never interprets a statement beyond those two forms.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::{Positions, SqlProblem};

/// `WATERMARK FOR column AS expression`, as written in a `CREATE TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WatermarkClause {
    /// The table whose column list holds it.
    pub table: String,
    /// The event-time column.
    pub column: String,
    /// The expression's text (`dateTime - INTERVAL '4' SECOND`).
    pub expression: String,
    /// Where the clause starts.
    pub offset: usize,
}

/// `FOR SYSTEM_TIME AS OF time` after a table in a FROM: a lookup join's
/// table, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LookupClause {
    /// The table it follows.
    pub table: String,
    /// The time column (`B.p_time`), as written.
    pub time: String,
    /// Where `FOR` is.
    pub offset: usize,
}

/// The text sqlparser can read, and what was taken out of it.
pub(super) struct Rewritten {
    pub text: String,
    pub watermarks: Vec<WatermarkClause>,
    pub lookups: Vec<LookupClause>,
}

/// Rewrite `text` (see the module doc).
pub(super) fn rewrite(text: &str, positions: &Positions) -> Result<Rewritten, SqlProblem> {
    let tokens = Tokenizer::new(&GenericDialect {}, text)
        .tokenize_with_location()
        .map_err(|e| SqlProblem {
            offset: positions.offset(e.location),
            message: e.message.clone(),
        })?;
    // Only tokens that mean something: whitespace and comments are skipped
    // when looking at neighbours.
    let tokens: Vec<&TokenWithSpan> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let mut bytes = text.as_bytes().to_vec();
    let mut blank = |from: usize, to: usize| {
        for b in &mut bytes[from.min(to)..to] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let start = |t: &TokenWithSpan| positions.offset(t.span.start);
    let end = |t: &TokenWithSpan| positions.offset(t.span.end);
    let mut watermarks = Vec::new();
    let mut lookups = Vec::new();
    let mut table: Option<String> = None;
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i].token;
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::SemiColon => {
                table = None;
                depth = 0;
            }
            _ => {}
        }
        // `CREATE TABLE [IF NOT EXISTS] name`: the table a WATERMARK belongs to.
        if is_keyword(token, Keyword::CREATE)
            && tokens
                .get(i + 1)
                .is_some_and(|t| is_keyword(&t.token, Keyword::TABLE))
        {
            let mut j = i + 2;
            if tokens
                .get(j)
                .is_some_and(|t| is_keyword(&t.token, Keyword::IF))
            {
                j += 3;
            }
            table = tokens
                .get(j)
                .and_then(|t| word(&t.token))
                .map(str::to_string);
        }
        let previous = i.checked_sub(1).map(|p| &tokens[p].token);
        let next = tokens.get(i + 1).map(|t| &t.token);
        // `…, WATERMARK FOR col AS expr` at the top of a column list.
        if depth == 1
            && matches!(previous, Some(Token::Comma))
            && is_word(token, "WATERMARK")
            && next.is_some_and(|t| is_keyword(t, Keyword::FOR))
        {
            let clause_start = start(tokens[i]);
            let column = tokens.get(i + 2).and_then(|t| word(&t.token));
            let as_ok = tokens
                .get(i + 3)
                .is_some_and(|t| is_keyword(&t.token, Keyword::AS));
            let (Some(column), true, Some(table)) = (column, as_ok, table.clone()) else {
                return Err(SqlProblem {
                    offset: clause_start,
                    message: "write a watermark as `WATERMARK FOR <column> AS <column> - INTERVAL '<n>' SECOND` inside CREATE TABLE's column list".into(),
                });
            };
            // The expression runs to the `,` or `)` that closes the clause.
            let mut j = i + 4;
            let mut nested = 0usize;
            while let Some(t) = tokens.get(j) {
                match t.token {
                    Token::LParen => nested += 1,
                    Token::RParen if nested == 0 => break,
                    Token::RParen => nested -= 1,
                    Token::Comma if nested == 0 => break,
                    Token::SemiColon | Token::EOF => break,
                    _ => {}
                }
                j += 1;
            }
            let (Some(expr_start), Some(expr_end)) = (
                tokens.get(i + 4).and_then(|t| start(t)),
                j.checked_sub(1)
                    .and_then(|k| tokens.get(k))
                    .and_then(|t| end(t)),
            ) else {
                return Err(SqlProblem {
                    offset: clause_start,
                    message: format!(
                        "`WATERMARK FOR {column} AS` needs an expression, e.g. `{column} - INTERVAL '4' SECOND`"
                    ),
                });
            };
            let clause_start = clause_start.unwrap_or(expr_start);
            watermarks.push(WatermarkClause {
                table,
                column: column.to_string(),
                expression: text[expr_start..expr_end.max(expr_start)]
                    .trim()
                    .to_string(),
                offset: clause_start,
            });
            // Blank from the comma before the clause to its last token.
            if let Some(comma) = start(tokens[i - 1]) {
                blank(comma, expr_end);
            }
            i = j;
            continue;
        }
        // `table FOR SYSTEM_TIME AS OF x.time`: a lookup join's table.
        if is_keyword(token, Keyword::FOR)
            && next.is_some_and(|t| is_word(t, "SYSTEM_TIME"))
            && let Some(table) = previous.and_then(word)
        {
            let clause_start = start(tokens[i]);
            let as_of = tokens
                .get(i + 2)
                .is_some_and(|t| is_keyword(&t.token, Keyword::AS))
                && tokens
                    .get(i + 3)
                    .is_some_and(|t| is_keyword(&t.token, Keyword::OF));
            // The time: a column, qualified or not (`x.time`).
            let mut j = i + 4;
            let mut parts = Vec::new();
            while let Some(part) = tokens.get(j).and_then(|t| word(&t.token)) {
                parts.push(part.to_string());
                match tokens.get(j + 1).map(|t| &t.token) {
                    Some(Token::Period) => j += 2,
                    _ => break,
                }
            }
            let last = tokens.get(j).and_then(|t| end(t));
            let (true, false, Some(from), Some(to)) = (as_of, parts.is_empty(), clause_start, last)
            else {
                return Err(SqlProblem {
                    offset: clause_start,
                    message: "write a lookup join as `JOIN table FOR SYSTEM_TIME AS OF s.time [AS t] ON s.k = t.k`, its time a column of the other side".into(),
                });
            };
            lookups.push(LookupClause {
                table: table.to_string(),
                time: parts.join("."),
                offset: from,
            });
            blank(from, to);
            i = j + 1;
            continue;
        }
        // `fn(TABLE name, …)`: a table argument.
        if is_keyword(token, Keyword::TABLE)
            && matches!(previous, Some(Token::LParen | Token::Comma))
            && next.is_some_and(|t| word(t).is_some())
            && let (Some(from), Some(to)) = (start(tokens[i]), end(tokens[i]))
        {
            blank(from, to);
        }
        i += 1;
    }
    let text = String::from_utf8(bytes).map_err(|e| SqlProblem {
        offset: None,
        message: format!("rewriting the statements: {e}"),
    })?;
    Ok(Rewritten {
        text,
        watermarks,
        lookups,
    })
}

fn is_keyword(token: &Token, keyword: Keyword) -> bool {
    matches!(token, Token::Word(w) if w.keyword == keyword && w.quote_style.is_none())
}

fn is_word(token: &Token, text: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text))
}

fn word(token: &Token) -> Option<&str> {
    match token {
        Token::Word(w) => Some(w.value.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite_text(text: &str) -> Rewritten {
        match rewrite(text, &Positions::new(text)) {
            Ok(r) => r,
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_watermark_clause_is_recorded_and_blanked_keeping_every_offset() {
        let text = "CREATE TABLE bid (a BIGINT, t TIMESTAMP(3),\n  WATERMARK FOR t AS t - INTERVAL '4' SECOND) WITH ('connector' = 'x');";
        let r = rewrite_text(text);
        assert_eq!(r.text.len(), text.len());
        assert_eq!(
            r.text,
            "CREATE TABLE bid (a BIGINT, t TIMESTAMP(3) \n                                            ) WITH ('connector' = 'x');"
        );
        assert_eq!(
            r.watermarks,
            vec![WatermarkClause {
                table: "bid".into(),
                column: "t".into(),
                expression: "t - INTERVAL '4' SECOND".into(),
                offset: text.find("WATERMARK").unwrap_or(0),
            }]
        );
    }

    #[test]
    fn table_arguments_lose_their_keyword_and_table_functions_keep_theirs() {
        let text = "SELECT * FROM TABLE(HOP(TABLE bid, DESCRIPTOR(t), INTERVAL '2' SECOND, INTERVAL '10' SECOND))";
        let r = rewrite_text(text);
        assert_eq!(
            r.text,
            "SELECT * FROM TABLE(HOP(      bid, DESCRIPTOR(t), INTERVAL '2' SECOND, INTERVAL '10' SECOND))"
        );
        assert!(r.watermarks.is_empty());
    }

    #[test]
    fn a_lookup_clause_is_recorded_and_blanked_keeping_every_offset() {
        let text = "SELECT * FROM b JOIN side FOR SYSTEM_TIME AS OF b.p_time AS s ON b.k = s.k";
        let r = rewrite_text(text);
        let clause = "FOR SYSTEM_TIME AS OF b.p_time";
        assert_eq!(r.text, text.replace(clause, &" ".repeat(clause.len())));
        assert_eq!(
            r.lookups,
            vec![LookupClause {
                table: "side".into(),
                time: "b.p_time".into(),
                offset: text.find("FOR").unwrap_or(0),
            }]
        );
        let bad = "SELECT * FROM b JOIN side FOR SYSTEM_TIME AS b.t ON b.k = side.k";
        let e = rewrite(bad, &Positions::new(bad)).err();
        assert_eq!(e.and_then(|e| e.offset), bad.find("FOR"));
    }

    #[test]
    fn a_malformed_watermark_is_refused_at_its_position() {
        let text = "CREATE TABLE bid (t TIMESTAMP(3), WATERMARK FOR t) WITH ('connector' = 'x')";
        let e = rewrite(text, &Positions::new(text)).err();
        assert_eq!(e.and_then(|e| e.offset), text.find("WATERMARK"));
    }
}
