"""Question wordings of TinyWorld, one style per mirrored benchmark.

Every template has a ``{x}`` slot: an entity's name (single-hop) or a noun phrase built from a
chain ("the director of The Silent Harbor"). Styles override the ``plain`` tables key by key:

- ``nq``: lower-case search-engine queries without a question mark ("who directed x");
- ``trivia``: quiz phrasing, subject described by its type ("The city of X lies in which
  country?");
- ``popqa``: PopQA's one-template-per-relation style ("What is X's occupation?");
- ``hotpot``: HotpotQA's inverted questions ("The director of X was born in which city?");
- ``wiki2``: 2WikiMultihopQA's wording ("What is the place of birth of the director of film X?");
- ``musique``: MuSiQue's long nested compositions (plain tables plus merged phrases);
- ``bamboogle``: Bamboogle's conversational two-hop questions.
"""

from __future__ import annotations

# Final question about relation ``key`` of the thing named by {x}.
FINAL: dict[str, dict[str, list[str]]] = {
    "plain": {
        "person.born_in": [
            "Where was {x} born?",
            "In which city was {x} born?",
            "What is the birthplace of {x}?",
        ],
        "person.birth_year": ["When was {x} born?", "In what year was {x} born?"],
        "person.studied_at": ["Where did {x} study?", "Which university did {x} attend?"],
        "person.occupation": ["What is the occupation of {x}?", "What does {x} do for a living?"],
        "city.country": ["In which country is {x}?", "Which country is {x} located in?"],
        "city.founded_year": ["When was {x} founded?", "In what year was {x} founded?"],
        "country.capital": ["What is the capital of {x}?", "Which city is the capital of {x}?"],
        "country.independence_year": [
            "When did {x} become independent?",
            "In what year did {x} gain independence?",
        ],
        "company.founded_by": ["Who founded {x}?", "Who is the founder of {x}?"],
        "company.founded_year": ["When was {x} founded?", "In what year was {x} established?"],
        "company.headquarters": ["Where is {x} headquartered?", "In which city is {x} based?"],
        "company.ceo": ["Who is the CEO of {x}?", "Who is the chief executive of {x}?"],
        "university.city": ["Where is {x} located?", "In which city is {x}?"],
        "university.founded_year": ["When was {x} founded?", "In what year was {x} established?"],
        "film.directed_by": ["Who directed {x}?", "Who is the director of {x}?"],
        "film.release_year": ["When was {x} released?", "In what year did {x} come out?"],
        "film.starring": ["Who starred in {x}?", "Who played the lead role in {x}?"],
        "film.produced_by": ["Which company produced {x}?", "Which studio produced {x}?"],
        "film.genre": ["What genre is {x}?", "What kind of film is {x}?"],
    },
    "nq": {
        "person.born_in": ["where was {x} born", "where is {x} from"],
        "person.birth_year": ["when was {x} born", "what year was {x} born"],
        "person.studied_at": ["where did {x} go to college", "where did {x} study"],
        "person.occupation": ["what is {x}'s job", "what does {x} do"],
        "city.country": ["what country is {x} in", "{x} is in what country"],
        "city.founded_year": ["when was {x} founded", "when was the city of {x} founded"],
        "country.capital": ["what is the capital of {x}", "capital city of {x}"],
        "country.independence_year": [
            "when did {x} gain independence",
            "when did {x} become independent",
        ],
        "company.founded_by": ["who founded {x}", "who started {x}"],
        "company.founded_year": ["when was {x} founded", "when did {x} start"],
        "company.headquarters": ["where is {x} headquartered", "where is the headquarters of {x}"],
        "company.ceo": ["who is the ceo of {x}", "who runs {x}"],
        "university.city": ["where is {x} located", "what city is {x} in"],
        "university.founded_year": ["when was {x} founded", "when was {x} established"],
        "film.directed_by": ["who directed {x}", "who is the director of {x}"],
        "film.release_year": ["when did {x} come out", "when was {x} released"],
        "film.starring": ["who starred in {x}", "who plays the lead in {x}"],
        "film.produced_by": ["who produced {x}", "what studio made {x}"],
        "film.genre": ["what genre is {x}", "what kind of movie is {x}"],
    },
    "trivia": {
        "person.born_in": ["In which city was {x} born?", "{x} was born in which city?"],
        "person.birth_year": ["In which year was {x} born?", "{x} was born in which year?"],
        "person.studied_at": [
            "At which university did {x} study?",
            "{x} is a graduate of which university?",
        ],
        "person.occupation": ["What is the profession of {x}?", "By profession, what is {x}?"],
        "city.country": ["{x} lies in which country?", "In which country would you find {x}?"],
        "city.founded_year": ["In which year was {x} founded?"],
        "country.capital": [
            "Which city is the capital of {x}?",
            "{x} has which city as its capital?",
        ],
        "country.independence_year": ["In which year did {x} become independent?"],
        "company.founded_by": ["Who was the founder of {x}?", "{x} was founded by whom?"],
        "company.founded_year": ["In which year was {x} founded?"],
        "company.headquarters": ["In which city does {x} have its headquarters?"],
        "company.ceo": ["Who serves as chief executive of {x}?"],
        "university.city": ["In which city is {x} located?"],
        "university.founded_year": ["{x} was established in which year?"],
        "film.directed_by": ["Who directed {x}?", "{x} was directed by whom?"],
        "film.release_year": ["In which year was {x} released?"],
        "film.starring": ["Which actor played the lead role in {x}?"],
        "film.produced_by": ["Which studio produced {x}?"],
        "film.genre": ["To which genre does {x} belong?"],
    },
    "popqa": {
        "person.born_in": ["In what city was {x} born?"],
        "person.birth_year": ["In what year was {x} born?"],
        "person.studied_at": ["Where was {x} educated?"],
        "person.occupation": ["What is {x}'s occupation?"],
        "city.country": ["In what country is {x}?"],
        "city.founded_year": ["In what year was {x} founded?"],
        "country.capital": ["What is the capital of {x}?"],
        "country.independence_year": ["In what year did {x} become independent?"],
        "company.founded_by": ["Who founded {x}?"],
        "company.founded_year": ["In what year was {x} founded?"],
        "company.headquarters": ["Where is {x} headquartered?"],
        "company.ceo": ["Who is the CEO of {x}?"],
        "university.city": ["In what city is {x}?"],
        "university.founded_year": ["In what year was {x} founded?"],
        "film.directed_by": ["Who was the director of {x}?"],
        "film.release_year": ["In what year was {x} released?"],
        "film.starring": ["Who starred in {x}?"],
        "film.produced_by": ["Who was the producer of {x}?"],
        "film.genre": ["What genre is {x}?"],
    },
    "hotpot": {
        "person.born_in": ["{x} was born in which city?", "Where was {x} born?"],
        "person.birth_year": ["{x} was born in what year?", "In what year was {x} born?"],
        "person.studied_at": ["{x} studied at which university?"],
        "city.country": ["{x} is located in which country?"],
        "company.founded_year": ["{x} was founded in what year?"],
        "film.directed_by": ["{x} was directed by whom?"],
    },
    "wiki2": {
        "person.born_in": ["Where was {x} born?", "What is the place of birth of {x}?"],
        "person.birth_year": ["When was {x} born?", "What is the year of birth of {x}?"],
        "person.studied_at": ["Where did {x} study?", "Which university did {x} graduate from?"],
        "city.country": ["Which country is {x} in?"],
        "film.directed_by": ["Who is the director of {x}?"],
        "company.founded_by": ["Who is the founder of {x}?"],
    },
    "musique": {},
    "bamboogle": {
        "person.born_in": ["What city was {x} born in?"],
        "person.birth_year": ["What year was {x} born?"],
        "person.studied_at": ["What university did {x} go to?"],
        "city.country": ["What country is {x} in?"],
        "city.founded_year": ["What year was {x} founded?"],
        "country.capital": ["What is the capital city of {x}?"],
        "company.founded_year": ["What year was {x} founded?"],
        "company.founded_by": ["Who started {x}?"],
        "university.founded_year": ["What year was {x} founded?"],
    },
}

# Noun phrase for the object of ``key`` seen from {x}: the bridge entity of a chain.
NOUN_PHRASE: dict[str, dict[str, list[str]]] = {
    "plain": {
        "film.directed_by": ["the director of {x}", "the person who directed {x}"],
        "film.starring": ["the star of {x}", "the lead actor of {x}"],
        "film.produced_by": ["the studio that produced {x}", "the producer of {x}"],
        "company.founded_by": ["the founder of {x}", "the person who founded {x}"],
        "company.ceo": ["the CEO of {x}", "the chief executive of {x}"],
        "company.headquarters": [
            "the city where {x} is headquartered",
            "the headquarters city of {x}",
        ],
        "person.born_in": ["the birthplace of {x}", "the city where {x} was born"],
        "person.studied_at": ["the university {x} attended", "the alma mater of {x}"],
        "university.city": ["the city where {x} is located", "the home city of {x}"],
        "city.country": ["the country where {x} is located", "the country that {x} is in"],
        "country.capital": ["the capital of {x}", "the capital city of {x}"],
    },
    "bamboogle": {
        "film.directed_by": ["the person who made {x}", "the filmmaker behind {x}"],
        "film.produced_by": ["the studio behind {x}"],
        "company.founded_by": ["the person who started {x}"],
        "company.ceo": ["the current CEO of {x}"],
        "person.born_in": ["the hometown of {x}"],
        "person.studied_at": ["the school {x} went to"],
    },
}

# Two relations read as one phrase: (bridge relation, next relation) → phrase on {x}.
MERGED_NOUN_PHRASE: dict[tuple[str, str], list[str]] = {
    ("person.born_in", "city.country"): [
        "the country where {x} was born",
        "the birth country of {x}",
    ],
    ("company.headquarters", "city.country"): ["the country where {x} is headquartered"],
    ("university.city", "city.country"): ["the country where {x} is located"],
    ("person.studied_at", "university.city"): ["the city where {x} went to university"],
}
MERGED_FINAL: dict[tuple[str, str], list[str]] = {
    ("person.born_in", "city.country"): ["In which country was {x} born?"],
    ("company.headquarters", "city.country"): ["In which country is {x} headquartered?"],
    ("person.studied_at", "university.city"): ["In which city did {x} go to university?"],
}

# Comparisons: side chain (relation keys) → templates with {a}, {b}.
COMPARE_EARLIER: dict[tuple[str, ...], list[str]] = {
    ("person.birth_year",): ["Who was born first, {a} or {b}?", "Who is older, {a} or {b}?"],
    ("company.founded_year",): [
        "Which company was founded first, {a} or {b}?",
        "Which is older, {a} or {b}?",
    ],
    ("university.founded_year",): ["Which university was established first, {a} or {b}?"],
    ("city.founded_year",): ["Which city was founded first, {a} or {b}?"],
    ("film.release_year",): [
        "Which film came out first, {a} or {b}?",
        "Which film was released earlier, {a} or {b}?",
    ],
    ("country.independence_year",): ["Which country became independent first, {a} or {b}?"],
    ("film.directed_by", "person.birth_year"): [
        "Which film has the director who was born first, {a} or {b}?"
    ],
}
COMPARE_LATER: dict[tuple[str, ...], list[str]] = {
    ("person.birth_year",): ["Who was born later, {a} or {b}?", "Who is younger, {a} or {b}?"],
    ("company.founded_year",): ["Which company was founded more recently, {a} or {b}?"],
    ("university.founded_year",): ["Which university is younger, {a} or {b}?"],
    ("city.founded_year",): ["Which city was founded later, {a} or {b}?"],
    ("film.release_year",): ["Which film was released more recently, {a} or {b}?"],
    ("country.independence_year",): ["Which country became independent later, {a} or {b}?"],
    ("film.directed_by", "person.birth_year"): ["Which film has the younger director, {a} or {b}?"],
}
COMPARE_SAME: dict[tuple[str, ...], list[str]] = {
    ("person.born_in",): [
        "Were {a} and {b} born in the same city?",
        "Do {a} and {b} share a birthplace?",
    ],
    ("person.studied_at",): ["Did {a} and {b} attend the same university?"],
    ("company.headquarters",): ["Are {a} and {b} headquartered in the same city?"],
    ("city.country",): [
        "Are {a} and {b} in the same country?",
        "Are {a} and {b} located in the same country?",
    ],
    ("university.city",): ["Are {a} and {b} located in the same city?"],
    ("film.directed_by",): [
        "Were {a} and {b} directed by the same person?",
        "Do {a} and {b} have the same director?",
    ],
    ("film.produced_by",): ["Were {a} and {b} produced by the same studio?"],
    ("person.born_in", "city.country"): [
        "Were {a} and {b} born in the same country?",
        "Are {a} and {b} from the same country?",
    ],
    ("company.headquarters", "city.country"): ["Are {a} and {b} based in the same country?"],
    ("film.directed_by", "person.born_in"): [
        "Were the directors of {a} and {b} born in the same city?"
    ],
}

# Style overrides of the comparison wordings: (op, side chain) → templates. HotpotQA words
# comparisons without naming the type ("Which was founded first, X or Y?").
COMPARE_STYLE: dict[str, dict[tuple[str, tuple[str, ...]], list[str]]] = {
    "hotpot": {
        ("earlier", ("person.birth_year",)): ["Who was born earlier, {a} or {b}?"],
        ("earlier", ("company.founded_year",)): ["Which was founded first, {a} or {b}?"],
        ("earlier", ("university.founded_year",)): ["Which was founded first, {a} or {b}?"],
        ("earlier", ("city.founded_year",)): ["Which was founded first, {a} or {b}?"],
        ("earlier", ("film.release_year",)): ["Which was released first, {a} or {b}?"],
        ("later", ("film.release_year",)): ["Which was released later, {a} or {b}?"],
        ("later", ("company.founded_year",)): ["Which was founded later, {a} or {b}?"],
        ("same", ("person.born_in",)): ["Are {a} and {b} from the same city?"],
        ("same", ("city.country",)): ["Are both {a} and {b} located in the same country?"],
        ("same", ("film.directed_by",)): ["Were both {a} and {b} made by the same director?"],
    },
}

# How a style names the subject of a question: entity type → pattern on {name}.
MENTION: dict[str, dict[str, str]] = {
    "trivia": {
        "film": "the film {name}",
        "company": "the company {name}",
        "city": "the city of {name}",
    },
    "wiki2": {"film": "film {name}", "company": "company {name}"},
}


def compare_templates(style: str, op: str, path: tuple[str, ...]) -> list[str]:
    table = {"earlier": COMPARE_EARLIER, "later": COMPARE_LATER, "same": COMPARE_SAME}[op]
    return COMPARE_STYLE.get(style, {}).get((op, path)) or table[path]


def final_templates(style: str, key: str) -> list[str]:
    return FINAL.get(style, {}).get(key) or FINAL["plain"][key]


def noun_phrases(style: str, key: str) -> list[str]:
    return NOUN_PHRASE.get(style, {}).get(key) or NOUN_PHRASE["plain"][key]
