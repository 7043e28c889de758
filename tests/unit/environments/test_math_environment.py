import pytest

from nemo_rl.environments.math_environment import MathEnvironment, answers_match, extract_answer, score_response


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is \\boxed{7}.", "7"),
        ("first \\boxed{1} then \\boxed{2}", "2"),  # the last box is the final answer
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
        ("Reasoning...\nAnswer: 42", "42"),
        ("answer = 3.5.", "3.5"),
        ("\\boxed{7", None),  # unbalanced
        ("no answer here", None),
        ("", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "pred, ref, ok",
    [
        ("7", "7", True),
        ("7.0", "7", True),
        ("1,000", "1000", True),
        ("-3", "3", False),
        ("\\frac{1}{2}", "0.5", True),
        ("x^2+2x+1", "(x+1)^2", True),
        ("\\sqrt{4}", "2", True),
        ("2", "3", False),
        ("}{", "1", False),
        ("\\frac{", "1", False),
        ("9" * 300, "9", False),
    ],
)
def test_answers_match_numerically_and_symbolically(pred: str, ref: str, ok: bool) -> None:
    assert answers_match(pred, ref) is ok


@pytest.mark.parametrize("text", ["\\boxed{}", "\\boxed{\\boxed{", "Answer:", "\x00\\boxed{\x00}", "\\boxed{" * 1000])
def test_malformed_responses_score_zero(text: str) -> None:
    assert score_response(text, "1") == 0.0


def test_environment_scores_a_batch_on_several_actors(ray_cluster) -> None:
    env = MathEnvironment(num_workers=2)
    try:
        responses = ["\\boxed{3}", "Answer: 4", "\\boxed{5}", "nothing", "\\boxed{2}"]
        assert env.score(responses, ["3", "4", "6", "1", "2"]) == [1.0, 1.0, 0.0, 0.0, 1.0]
        assert env.score([], []) == []
    finally:
        env.shutdown()
