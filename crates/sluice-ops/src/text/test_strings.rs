//! Strings the text ops' tests feed the tokenizers: adversarial ones for each alternative
//! of the pre-tokenizer patterns, and seeded random ones.

/// Strings that probe each alternative of the GPT-2 regex and the edges between them.
pub(crate) fn adversarial() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        " ",
        "   ",
        "\t",
        "\n",
        "\t\n \n\t ",
        "a  b",
        "a   ",
        "hello world  ",
        "  leading",
        " x",
        "\n\nfoo",
        "foo \n bar",
        "foo\t bar",
        "foo \tbar",
        "a \u{b}b\u{c}c",
        "it's I'm you're we've they'll he'd don't",
        "IT'S I'M YOU'RE 'S 'T 'Re 'LL",
        "'s",
        "''s",
        " 's",
        "x'",
        "'",
        "'r",
        "'l",
        "!'s",
        "a's'd'm't're've'll",
        "12345 678 9.5 1,000,000",
        "abc123def 456ghi",
        "!!!??? ... a--b (x) [y] {z} <w>",
        " !!  ?? ",
        "日本語のテキスト",
        "Здравствуй мир",
        "naïve café Straße",
        "e\u{301} a\u{308}b \u{301}x",
        "😀😀 👍🏽 a😀b",
        "\0abc\0 \0",
        "line\r\n",
        "\r\n\r\n",
        "\u{a0}x a\u{a0}\u{a0}b",
        "a\u{3000}b \u{2003}\u{2003}c \u{85}d \u{2028}e",
        "\u{200b}zero\u{200b}width \u{feff}bom",
        "٣٤ Ⅻ ½ ² x²",
        "ǅemal ªb º",
        "\u{1c}\u{1d}\u{1e}\u{1f} \u{7f}",
        "xyz xyzxyz xyzz xxyz",
        "QJK QJ JK QJKQJK QQJJKK QJJK",
        "<|endoftext|>",
        "hello<|endoftext|>world",
        "<|endoftext",
        "a [xyz] b",
        "ＡＢＣ ｘｙｚ ﬁ",
        "HTMLParser getHTTPResponse camelCase iPhone ÉCOLE École",
        "path//to/\n\n/ y !!/\r\n",
        "1234567890 ½² 12 1 \n 123\n\n\n  \n",
        "DON'T 'S's 'Ll 'VE",
        "中文和日本語のひらがなカタカナ 123中456",
        "a＜｜endoftext｜＞b",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push("x".repeat(10_000));
    v.push("ab".repeat(5_000));
    v.push(" ".repeat(10_000));
    v.push(format!("{} a", " ".repeat(300)));
    v.push("the ".repeat(3_000));
    v.push("xyz".repeat(1_000));
    v
}

/// A SplitMix64 generator: seeded random strings without a dependency.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `n` random strings: every ASCII character, and non-ASCII letters, digits, spaces and
/// marks, weighted towards the characters the regex treats specially.
pub(crate) fn random_strings(seed: u64, n: usize) -> Vec<String> {
    let special: Vec<char> = " '  \t\n\r\u{b}\u{c}sStTreRvVmMlLdDxyzQJK09!?.-_<>|"
        .chars()
        .collect();
    let unicode: Vec<char> =
        "éßЖ中日😀\u{301}\u{a0}\u{2003}\u{3000}\u{85}\u{2028}\u{200b}٣Ⅻ½²ǅªＡ\u{feff}ﬁ"
            .chars()
            .collect();
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            let len = rng.below(40);
            (0..len)
                .map(|_| match rng.below(10) {
                    0..=4 => special[rng.below(special.len())],
                    5..=7 => char::from(rng.below(128) as u8),
                    _ => unicode[rng.below(unicode.len())],
                })
                .collect()
        })
        .collect()
}

/// Every pair of ASCII characters, alone and in the contexts where the pre-tokenizer
/// patterns' alternatives meet (after a space, an apostrophe, a line break; before a
/// contraction).
pub(crate) fn ascii_pairs() -> Vec<String> {
    let chars: Vec<char> = (0u8..128).map(char::from).collect();
    let mut texts = Vec::new();
    for &a in &chars {
        for &b in &chars {
            texts.push(format!("{a}{b}"));
            texts.push(format!("{a} {b}x"));
            texts.push(format!("'{a}{b}"));
            texts.push(format!("{a}{b}'s"));
            texts.push(format!("{a}\n{b} "));
        }
    }
    texts
}

/// `n` BPE merges learnt greedily from `words` (each a list of initial symbols): the most
/// frequent adjacent pair, ties broken by the pair, merged everywhere, repeated.
pub(crate) fn learn_merges(mut words: Vec<Vec<String>>, n: usize) -> Vec<(String, String)> {
    let mut merges = Vec::new();
    for _ in 0..n {
        let mut counts: std::collections::BTreeMap<(String, String), usize> = Default::default();
        for w in &words {
            for p in w.windows(2) {
                *counts.entry((p[0].clone(), p[1].clone())).or_default() += 1;
            }
        }
        let Some((best, _)) = counts.into_iter().max_by_key(|(_, c)| *c) else {
            break;
        };
        for w in &mut words {
            let mut i = 0;
            while i + 1 < w.len() {
                if w[i] == best.0 && w[i + 1] == best.1 {
                    let right = w.remove(i + 1);
                    w[i].push_str(&right);
                }
                i += 1;
            }
        }
        merges.push(best);
    }
    merges
}
