# The models the prediction benches (prediction_accuracy.sh, profile_vs_run.sh) train,
# in one place. Source it; `prediction_model NAME` sets `model_args` (the model and its
# sizes, for `train` and `profile`) and `model_data` (its dataset, for `train`).
prediction_model() {
  case "$1" in
    mlp) model_args=(--model mlp --model-option layers=8 --model-option width=1024 --model-option input=1024)
         model_data=synthetic ;;
    gpt) model_args=(--model gpt --model-option layers=6 --model-option width=128 --model-option heads=4
                     --model-option context=32)
         model_data=fortunes ;;
    fmnist-cnn) model_args=(--model fmnist-cnn) model_data=fashion-mnist ;;
    *) echo "unknown model $1 (gpt, mlp or fmnist-cnn)" >&2; exit 2 ;;
  esac
}
